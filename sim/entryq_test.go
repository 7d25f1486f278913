package sim

import (
	"context"
	"testing"
)

// TestEntryQueueRoom checks node/queue.go's room rule: a hop's last report
// less the reservations it does not count yet, which it counts from the
// second report after the session opened.
func TestEntryQueueRoom(t *testing.T) {
	if got := kvNeed(17, 1); got != 48 {
		t.Fatalf("kvNeed(17, 1) = %d, want 3 blocks of 16", got)
	}
	eq := newEntryQueue(2)
	if !eq.fits(0, 1<<30) {
		t.Fatal("a node with no report must be given the request (its stage decides)")
	}
	eq.report(0, kvRep{free: 100, sessions: 0})
	if !eq.fits(0, 1<<30) {
		t.Fatal("a node running nothing must be given the request (CodeNoKV is its answer)")
	}
	eq.report(0, kvRep{free: 100, sessions: 1})
	if eq.fits(0, 101) || !eq.fits(0, 100) {
		t.Fatal("free 100: a need of 100 fits, 101 does not")
	}
	r := &kvResv{node: 0, need: 60}
	eq.resv[0] = append(eq.resv[0], r)
	if eq.fits(0, 50) || !eq.fits(0, 40) {
		t.Fatal("a reservation of 60 leaves room for 40, not 50")
	}
	eq.opened([]*kvResv{r})
	eq.beat += 3 // reports nobody looked at do not count
	if eq.fits(0, 50) {
		t.Fatal("the first report a look sees after the session opened may predate it: the reservation still counts")
	}
	if eq.fits(0, 50) {
		t.Fatal("the same report again: the reservation still counts")
	}
	eq.beat++
	if !eq.fits(0, 50) || len(eq.resv[0]) != 0 {
		t.Fatalf("a newer report counts the session: reservation kept %v", eq.resv[0])
	}
	r2 := &kvResv{node: 1, need: 10}
	eq.resv[1] = []*kvResv{r2}
	eq.release([]*kvResv{r2})
	if len(eq.resv[1]) != 0 {
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
