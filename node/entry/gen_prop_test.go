package entry

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestGenInvariants feeds random events to generations and checks what
// must hold whatever the order: nothing follows the end, the replays
// of failures never pass the cap (moves count but are not held to it), every end closes its attempt first and is followed
// by exactly one of Reroute and Fail, and only a Start sends a prefill.
func TestGenInvariants(t *testing.T) {
	peers := []string{"a", "b", "c", "d", "entry"}
	seen := map[string]int{} // the effects the runs reached, so that the checks are not idle
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 1))
		cfg := Config{Self: "entry", MaxReplays: 3, RepairWait: time.Second, StepTimeout: time.Second, Vocab: 10}
		g := NewGen(cfg)
		now := scriptT0
		over := false
		pos := 0
		for step := range 200 {
			now = now.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
			var ev Event
			switch rng.IntN(10) {
			case 0:
				ev = Start{Hops: []string{peers[rng.IntN(4)], peers[rng.IntN(5)]}, Pos: pos}
			case 1, 2:
				ev = TokenArrived{From: "b", Pos: pos + rng.IntN(2), Token: int32(rng.IntN(12)) - 1}
			case 3:
				ev = HopFailed{At: peers[rng.IntN(5)], Kind: EndKind(rng.IntN(6)), Reason: "x"}
			case 4:
				ev = PeerDown{Peer: peers[rng.IntN(5)], Reason: "down"}
			case 5:
				ev = TimedOut{}
			case 6:
				ev = Delivered{Finished: rng.IntN(20) == 0, Audit: rng.IntN(3) == 0, Draining: peers[:rng.IntN(2)]}
			case 7:
				var f *End
				if rng.IntN(2) == 0 {
					f = &End{Kind: EndFault, Blame: []string{peers[rng.IntN(4)]}, Reason: "fault"}
				}
				ev = Checked{Fail: f}
			case 8:
				ev = Rejected{From: peers[rng.IntN(5)], Reason: "r"}
			case 9:
				ev = SendFailed{Reason: "s", Unreachable: rng.IntN(2) == 0}
			}
			before := g.Replays
			effs := g.Step(now, ev)
			if over && len(effs) > 0 {
				t.Fatalf("seed %d step %d: %T after the end gave %v", seed, step, ev, effs)
			}
			for i, e := range effs {
				seen[fmt.Sprintf("%T", e)]++
				switch e := e.(type) {
				case Send:
					if _, ok := ev.(Start); ok != e.Prefill {
						t.Fatalf("seed %d step %d: %T gave a send with prefill %v", seed, step, ev, e.Prefill)
					}
				case Deliver:
					pos++
				case Close:
					if i != 0 {
						t.Fatalf("seed %d step %d: close is not the first effect: %v", seed, step, effs)
					}
					n := 0
					for _, f := range effs[1:] {
						switch f.(type) {
						case Reroute, Fail:
							n++
						}
					}
					if n != 1 {
						t.Fatalf("seed %d step %d: an end without one reroute or fail: %v", seed, step, effs)
					}
					if _, ok := effs[len(effs)-1].(Reroute); ok && slices.Contains(e.End.Blame, "entry") && slices.Contains(g.Avoid, "entry") {
						t.Fatalf("seed %d step %d: the entry avoids itself", seed, step)
					}
				case Reroute:
					if e.Failure && before >= cfg.MaxReplays {
						t.Fatalf("seed %d step %d: a failure rerouted after %d replays, the cap is %d", seed, step, before, cfg.MaxReplays)
					}
				case Done, Fail:
					over = true
				}
			}
		}
	}
	for _, k := range []string{"entry.Send", "entry.Deliver", "entry.Audit", "entry.Close", "entry.Rewind", "entry.Backoff", "entry.Reroute", "entry.Fail", "entry.Done"} {
		if seen[k] == 0 {
			t.Errorf("no run reached %s: %v", k, seen)
		}
	}
}
