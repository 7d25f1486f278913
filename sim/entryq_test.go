package sim

import (
	"context"
	"testing"
)

// TestEntryQueueRoom checks the sim's reports in node/entry's ledger:
// heartbeat rounds mark them, so that a reservation counts until the
// second round a look sees after its session opened (the ledger's own
// rules are node/entry's scripts, testdata/admit).
func TestEntryQueueRoom(t *testing.T) {
	eq := newEntryQueue(nil, 2)
	fits := func(need int) bool { return eq.led.Fits("n0", eq.reportOf(0), need) }
	if !fits(1 << 30) {
		t.Fatal("a node with no report must be given the request (its stage decides)")
	}
	eq.report(0, kvRep{free: 100, sessions: 1})
	if fits(101) || !fits(100) {
		t.Fatal("free 100: a need of 100 fits, 101 does not")
	}
	r := eq.led.Reserve("n0", 60)
	if fits(50) || !fits(40) {
		t.Fatal("a reservation of 60 leaves room for 40, not 50")
	}
	eq.opened([]*kvResv{r})
	eq.beat += 3 // rounds nobody looked at do not count
	if fits(50) {
		t.Fatal("the first round a look sees after the session opened may predate it: the reservation still counts")
	}
	if fits(50) {
		t.Fatal("the same round again: the reservation still counts")
	}
	eq.beat++
	if !fits(50) || eq.led.Held("n0") != 0 {
		t.Fatalf("a newer round counts the session: %d tokens still held", eq.led.Held("n0"))
	}
	r2 := eq.led.Reserve("n1", 10)
	eq.release([]*kvResv{r2})
	if eq.led.Held("n1") != 0 {
		t.Fatal("release left the reservation")
	}
}

// TestEntryQueueAdmits runs single24 well above what its KV memory holds
// at once: requests wait at the entry instead of being refused by busy
// hops (no stage refuses one for memory), are admitted within the
// deadline or refused at it, and nothing else fails.
func TestEntryQueueAdmits(t *testing.T) {
	spec := single24Spec(t, 2.5, 300)
	res, err := RunSwarm(context.Background(), spec, "strata")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("completed %d failed %v queued %d refused %d wait p50 %.1f p99 %.1f s; broken %v",
		res.Completed, res.FailedByCause, res.EntryQueued, res.EntryRefused, res.EntryWaitP50, res.EntryWaitP99, res.BrokenByCause)
	if res.EntryQueued == 0 {
		t.Fatal("no request waited at the entry: the load does not exercise the queue")
	}
	if res.EntryWaitP99 > entryQueueTimeout {
		t.Fatalf("an admitted request waited %.1f s, past the %v s deadline", res.EntryWaitP99, entryQueueTimeout)
	}
	if res.Failed != res.FailedByCause[FailQueueRefused] || res.Failed != res.EntryRefused {
		t.Fatalf("failures other than the queue's refusals: %v (refused %d)", res.FailedByCause, res.EntryRefused)
	}
	if busy := res.BrokenByCause["queue_full"] + res.BrokenByCause["queue_timeout"]; busy > 0 {
		t.Fatalf("%d attempts refused by busy stages: the entry admitted past the room its hops reported", busy)
	}
	if res.Completed < 200 {
		t.Fatalf("only %d requests completed", res.Completed)
	}
}
