package sim

import "testing"

// TestEntryReplayRules checks the client's reaction to a broken attempt,
// node/entry's Replay.Ended as lost calls it: busy answers spend no
// replay but end the request after the repair wait; a hop that died
// spends one, up to the cap; a move is replayed even past the cap.
func TestEntryReplayRules(t *testing.T) {
	newWorld := testWorld
	// brk breaks q for cause c at node a at time now and returns the
	// replay the client scheduled (nil: none, it failed).
	brk := func(w *world, q *query, c cause, now float64) *query {
		w.s.now = now
		q.cause, q.blame = c, 0
		n := len(w.s.events)
		w.cl.lost(q)
		if len(w.s.events) == n {
			return nil
		}
		return w.cl.lastReplay
	}
	t.Run("busy spends no replay", func(t *testing.T) {
		w := newWorld()
		q := &query{retries: maxReplays, input: 10, output: 5}
		nq := brk(w, q, causeQueueTimeout, 100)
		if nq == nil || nq.retries != maxReplays || nq.busy != 1 || nq.busySince != 100 {
			t.Fatalf("busy at the cap: replay %+v, failed %v", nq, w.s.stats.failedBy)
		}
		if len(nq.avoid) != 1 || nq.avoid[0] != "a" {
			t.Fatalf("busy hop not avoided: %v", nq.avoid)
		}
		if again := brk(w, nq, causeQueueFull, 100+repairWait+1); again != nil || w.s.stats.failedBy[FailBusyTooLong] != 1 {
			t.Fatalf("busy past the repair wait: replay %+v, failed %v", again, w.s.stats.failedBy)
		}
	})
	t.Run("progress starts the busy wait again", func(t *testing.T) {
		w := newWorld()
		q := &query{input: 10, output: 5}
		nq := brk(w, q, causeQueueTimeout, 100)
		nq.decodes = 2 // the retry was admitted and made progress
		if again := brk(w, nq, causeQueueFull, 100+repairWait+1); again == nil || again.busy != 1 {
			t.Fatalf("busy again after progress: replay %+v, failed %v", again, w.s.stats.failedBy)
		}
	})
	t.Run("death spends a replay up to the cap", func(t *testing.T) {
		w := newWorld()
		q := &query{retries: maxReplays - 1}
		nq := brk(w, q, causeDied, 5)
		if nq == nil || nq.retries != maxReplays {
			t.Fatalf("death below the cap: replay %+v", nq)
		}
		if again := brk(w, nq, causeDied, 6); again != nil || w.s.stats.failedBy[FailReplaysExhausted] != 1 || w.s.stats.failedWithPath != 1 {
			t.Fatalf("death at the cap: replay %+v, failed %v", again, w.s.stats.failedBy)
		}
	})
	t.Run("a move is replayed past the cap", func(t *testing.T) {
		w := newWorld()
		nq := brk(w, &query{retries: maxReplays}, causeMoved, 5)
		if nq == nil || nq.retries != maxReplays+1 {
			t.Fatalf("move at the cap: replay %+v, failed %v", nq, w.s.stats.failedBy)
		}
	})
}

// TestEntryPrefixMiss: a later hop's prefix miss is not a failure (no
// replay spent, no hop blamed) and the request goes on cold.
func TestEntryPrefixMiss(t *testing.T) {
	w := testWorld()
	q := &query{retries: maxReplays, input: 40, output: 5, gid: 3, cause: causePrefixMiss, blame: 1}
	w.cl.lost(q)
	nq := w.cl.lastReplay
	if nq == nil || !nq.cold || nq.retries != maxReplays || len(nq.avoid) != 0 || nq.gid != 3 {
		t.Fatalf("prefix miss at the replay cap: replay %+v, failed %v", nq, w.s.stats.failedBy)
	}
}

// testWorld is a strata world of two nodes, a and b, with every layer
// covered and nothing running.
func testWorld() *world {
	w := &world{s: &Sim{}, policy: "strata",
		spec: SwarmSpec{Nodes: []SwarmNode{{ID: "a"}, {ID: "b"}}, Timing: Timing{}.withDefaults()}}
	w.ro = newRoster(w, 2)
	w.ro.covered = true
	w.cl = &clients{w: w}
	return w
}
