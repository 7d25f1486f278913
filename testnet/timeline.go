package testnet

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/stratanet/strata/layers"
)

// timeline carries out the events at their times.
func (r *run) timeline(ctx context.Context) []*eventRun {
	var (
		out     []*eventRun
		stopped []*proc // stopped by an event and not restarted, latest last
		paused  []*proc // paused by an event and not resumed, latest last
		skipEnd bool    // the last nemesis fault was skipped: skip its undoing
	)
	for _, e := range r.sc.Events {
		t := time.NewTimer(time.Until(r.t0.Add(e.At)))
		select {
		case <-ctx.Done():
			t.Stop()
			return out
		case <-t.C:
		}
		ev := &eventRun{EventSpec: e, Node: e.Node, At: time.Since(r.t0)}
		if e.Fault != "" && faultEnd(e.Action) && skipEnd {
			skipEnd = false
			ev.Skipped = "its fault was skipped"
			r.logf("%s (%s): skipped, its fault was skipped", e.Action, e.Fault)
			out = append(out, ev)
			continue
		}
		err := func() error {
			switch e.Action {
			case ActJoin, ActRejoin:
				p := r.c.byName(e.Node)
				if e.Node == "" {
					if len(stopped) == 0 {
						return errors.New("no stopped node to rejoin")
					}
					p = stopped[len(stopped)-1]
					ev.Node = p.spec.Name
				}
				if p.running() {
					return fmt.Errorf("%s is running", p.spec.Name)
				}
				// A leaving node may still drain; its ports and data dir
				// are free only once it exits.
				wctx, cancel := context.WithTimeout(ctx, drainWait)
				err := p.waitExit(wctx)
				cancel()
				if err != nil {
					return fmt.Errorf("%s has not exited: %w", p.spec.Name, err)
				}
				for i, q := range stopped {
					if q == p {
						stopped = append(stopped[:i], stopped[i+1:]...)
						break
					}
				}
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				if err := r.c.start(sctx, p); err != nil {
					return err
				}
				r.watchJoins(p)
				go func() {
					rctx, cancel := context.WithTimeout(ctx, r.sc.ReadyTimeout)
					defer cancel()
					if waitReady(rctx, p) == nil {
						r.setReady(p, true)
						r.logf("%s serves again", p.spec.Name)
					}
				}()
				return nil
			case ActKill, ActLeave, ActKillLeader:
				p := r.c.byName(e.Node)
				if e.Pick != "" {
					name, err := r.choose(ctx, e.Pick)
					if err != nil {
						return err
					}
					p, ev.Node = r.c.byName(name), name
				}
				if e.Action == ActKillLeader {
					name, err := r.chooseRole(ctx, PickLeader)
					if err != nil {
						return fmt.Errorf("find the leader: %w", err)
					}
					if p = r.c.byName(name); p == nil {
						return fmt.Errorf("the leader %s is not one of this run's nodes", name)
					}
					ev.Node = name
				}
				sig := syscall.SIGKILL
				if e.Action == ActLeave {
					sig = syscall.SIGTERM
				}
				r.setReady(p, false)
				if err := r.c.signal(p, sig); err != nil {
					return err
				}
				stopped = append(stopped, p)
				if e.Action == ActLeave {
					go func() {
						wctx, cancel := context.WithTimeout(ctx, drainWait)
						defer cancel()
						if p.waitExit(wctx) == nil {
							r.mu.Lock()
							ev.Exited = time.Since(r.t0)
							r.mu.Unlock()
							r.logf("%s exited after its drain", p.spec.Name)
						}
					}()
				}
				return nil
			case ActPartition:
				var groups [][]int
				for _, g := range e.Groups {
					var idx []int
					for _, name := range g {
						idx = append(idx, r.c.byName(name).i)
					}
					groups = append(groups, idx)
				}
				return r.o.net.Partition(groups)
			case ActHeal:
				return r.o.net.Heal()
			case ActPause:
				p := r.c.byName(e.Node)
				if e.Pick != "" {
					name, err := r.chooseRole(ctx, e.Pick)
					if err != nil {
						return err
					}
					p, ev.Node = r.c.byName(name), name
				}
				// No new requests to a paused entry, as a load balancer's
				// health check would see; those in flight wait for it.
				r.setReady(p, false)
				if err := r.c.pause(p, true); err != nil {
					r.setReady(p, true)
					return err
				}
				paused = append(paused, p)
				return nil
			case ActResume:
				if len(paused) == 0 {
					return errors.New("no paused node to resume")
				}
				p := paused[len(paused)-1]
				paused = paused[:len(paused)-1]
				ev.Node = p.spec.Name
				if err := r.c.pause(p, false); err != nil {
					return err
				}
				go func() {
					rctx, cancel := context.WithTimeout(ctx, r.sc.ReadyTimeout)
					defer cancel()
					if waitReady(rctx, p) == nil {
						r.setReady(p, true)
					}
				}()
				return nil
			case ActDegrade, ActRestore:
				d, ok := r.o.net.(degrader)
				if !ok {
					return fmt.Errorf("%s: %w", e.Action, ErrUnsupported)
				}
				i := r.c.byName(e.Node).i
				if e.Action == ActRestore {
					return d.Restore(i)
				}
				return d.Degrade(i, e.Delay, e.Loss)
			}
			return fmt.Errorf("unknown action %q", e.Action)
		}()
		switch {
		case err != nil && e.Fault != "" && !faultEnd(e.Action) && errors.Is(err, errNoTarget):
			ev.Skipped, skipEnd = err.Error(), true
			r.logf("%s (%s): skipped: %v", e.Action, e.Fault, err)
		case err != nil:
			ev.Err = err.Error()
			r.logf("%s %s: FAILED: %v", e.Action, ev.Node, err)
		default:
			ev.Done = time.Since(r.t0)
			what := ev.Node
			if e.Action == ActPartition {
				what = fmt.Sprint(e.Groups)
			}
			if e.Fault != "" {
				what += " (" + e.Fault + ")"
			}
			r.logf("%s %s", e.Action, what)
		}
		out = append(out, ev)
	}
	return out
}

// errNoTarget: the node an event picks by its role does not exist now
// (no leader known); a nemesis skips such a fault.
var errNoTarget = errors.New("no node in that role")

// degrader is a network that can make one node's links lossy or slow.
type degrader interface {
	Degrade(i int, delay time.Duration, loss float64) error
	Restore(i int) error
}

// chooseRole picks a running node by its role: PickLeader the Raft
// leader, PickHop one of the stage holders that do not lead (the leader
// when it is the only holder).
func (r *run) chooseRole(ctx context.Context, pick string) (string, error) {
	v, _, err := r.swarm(ctx)
	if err != nil {
		return "", fmt.Errorf("pick %s: %w", pick, err)
	}
	leader := ""
	if v.Leader != nil {
		leader = r.nameOf(*v.Leader)
	}
	// Between two leaders: wait a little for the next one.
	for wait := time.Now().Add(5 * time.Second); pick == PickLeader && leader == "" && time.Now().Before(wait); {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if v, _, err := r.swarm(ctx); err == nil && v.Leader != nil {
			leader = r.nameOf(*v.Leader)
		}
	}
	if pick == PickLeader {
		if leader == "" {
			return "", fmt.Errorf("pick leader: %w: no leader known for 5 s", errNoTarget)
		}
		return leader, nil
	}
	var hops []string
	for _, p := range r.c.procs {
		if _, holds := v.Committed.Range(p.peerID); holds && p.running() && p.spec.Name != leader {
			hops = append(hops, p.spec.Name)
		}
	}
	if len(hops) > 0 {
		// Drawn from the run's own seeded generator: the same run picks
		// the same hops while the swarm's maps are the same.
		r.mu.Lock()
		defer r.mu.Unlock()
		return hops[r.rng.IntN(len(hops))], nil
	}
	if leader != "" {
		return leader, nil
	}
	return "", fmt.Errorf("pick hop: no stage holder in map epoch %d", v.Committed.Epoch)
}

// choose picks a running node by its place in the committed map:
// PickRedundant one whose every layer has another running holder,
// PickSole one that alone holds some layer; the first in scenario order.
func (r *run) choose(ctx context.Context, pick string) (string, error) {
	v, _, err := r.swarm(ctx)
	if err != nil {
		return "", fmt.Errorf("pick %s: %w", pick, err)
	}
	live := layers.LayerMap{Layers: v.Committed.Layers}
	for _, st := range v.Committed.Stages {
		if q := r.c.byName(r.nameOf(st.Node)); q != nil && q.running() {
			live.Stages = append(live.Stages, st)
		}
	}
	for _, p := range r.c.procs {
		if !p.running() {
			continue
		}
		if _, holds := live.Range(p.peerID); !holds {
			continue
		}
		rest := layers.LayerMap{Layers: live.Layers}
		for _, st := range live.Stages {
			if st.Node != p.peerID {
				rest.Stages = append(rest.Stages, st)
			}
		}
		if rest.Covers() == (pick == PickRedundant) {
			return p.spec.Name, nil
		}
	}
	return "", fmt.Errorf("pick %s: no such node in map epoch %d", pick, v.Committed.Epoch)
}
