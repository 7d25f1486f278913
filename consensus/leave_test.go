package consensus

import (
	"context"
	"testing"
	"time"
)

// TestLeaveWhenRemovedUnheard: a member that leaves gracefully returns
// even when it never hears that its drain committed. The leader removes
// it from Raft's configuration as soon as its NodeLeft commits, and
// hashicorp/raft stops replicating to a removed server at once, so its
// own state can still place it for good (seen in node's drain test under
// load: Leave waited out its context). Here the lane loses every append
// to the leaver once it drains; it must learn that it left by asking.
func TestLeaveWhenRemovedUnheard(t *testing.T) {
	cl, a, ln := settledThree(t)
	d := cl.addHost(false)
	cl.start(d, WithBootstrap(a.info()))
	cl.await("d a placed member", 10*time.Second, func() bool {
		_, placed := a.c().State().Committed().Range(d.id())
		return placed && inConfig(a, d)
	})
	stop := make(chan struct{})
	go func() {
		// Cut d off from the leader's appends once the leader knows it
		// drains: it then hears neither the drain's map nor its NodeLeft.
		for {
			for _, n := range []*testNode{a} {
				if m, ok := n.c().State().Member(d.id()); ok && m.Draining {
					ln.setCut(d, true)
					return
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	defer close(stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := d.c().Leave(ctx); err != nil {
		t.Fatalf("leave: %v%s", err, raftDump(cl))
	}
	d.dead.Store(true)
	if _, placed := d.c().State().Committed().Range(d.id()); !placed {
		t.Log("note: d heard the map that moved it off before the cut")
	}
	t.Logf("left in %v", time.Since(start).Round(time.Millisecond))
	cl.await("d gone from the leader's state", 10*time.Second, func() bool { return !a.c().State().IsMember(d.id()) })
}
