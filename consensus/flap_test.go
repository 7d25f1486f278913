package consensus

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestDeadVoterLeavesThroughShortTerms: the grace before a dead member
// leaves counts from the liveness verdict, whichever member leads. Here
// leadership moves every half grace, as it flapped on a loaded machine
// (TestFailoverKillFamilies in a CI run beside a CPU burner: six leader
// step-downs in the ten seconds after a voter holding the only copy of a
// layer was killed). The dead voter must still leave, and the map be
// repaired without it, while the terms stay short. Before, every new
// leader started the grace again, and no term lasted long enough to
// remove it.
func TestDeadVoterLeavesThroughShortTerms(t *testing.T) {
	const grace = time.Second
	ln := newLane()
	cl := newCluster(t, WithLiveness(ln, grace))
	cl.startMembers(4, 3)
	// The victim: one of the two voters besides the leader, one that
	// serves layers.
	var leader, victim *testNode
	cl.await("a map that places a voter besides the leader", 10*time.Second, func() bool {
		leader, victim = nil, nil
		for _, n := range cl.alive() {
			if n.c().IsLeader() {
				leader = n
			}
		}
		if leader == nil {
			return false
		}
		s := leader.c().State()
		if _, pending := s.Pending(); pending || !s.Committed().Covers() {
			return false
		}
		var voters []*testNode // live ones besides the leader
		for _, n := range cl.alive() {
			if n != leader && isVoter(leader, n) {
				voters = append(voters, n)
			}
		}
		if len(voters) != 2 || voterCount(leader) != 3 {
			return false // leadership has a live voter to move to
		}
		for _, n := range voters {
			if _, ok := s.Committed().Range(n.id()); ok {
				victim = n
			}
		}
		return victim != nil
	})

	// Leadership moves every half grace from the kill on, until the map
	// is repaired.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var moves atomic.Int32 // transfers asked
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(grace / 2)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			// To a live voter: Raft's own choice can be the dead one.
			var from, to *testNode
			for _, n := range cl.alive() {
				if n.c().IsLeader() {
					from = n
				}
			}
			for _, n := range cl.alive() {
				if from != nil && n != from && isVoter(from, n) {
					to = n
				}
			}
			if from == nil || to == nil {
				continue
			}
			moves.Add(1)
			id := raft.ServerID(to.id())
			_ = from.c().rn.raft.LeadershipTransferToServer(id, raft.ServerAddress(id)).Error()
		}
	}()
	term := leader.c().rn.raft.CurrentTerm()
	killed := time.Now()
	victim.kill()
	ln.setDown(true, victim)
	took := cl.waitAll("dead voter removed and the map repaired", 15*time.Second, func(s State) bool {
		_, placedDead := s.Committed().Range(victim.id())
		return !s.IsMember(victim.id()) && !placedDead && s.Committed().Covers()
	})
	close(stop)
	wg.Wait()
	t.Logf("dead voter removed and map repaired %v after the kill, through %d leadership moves asked (every %v; grace %v) and %d terms",
		took.Round(time.Millisecond), moves.Load(), grace/2, grace, cl.currentLeader(5*time.Second).c().rn.raft.CurrentTerm()-term)
	if moves.Load() == 0 {
		t.Fatalf("no leadership move in the %v before the repair: the terms were not short", time.Since(killed))
	}
	if ok, why := cl.pathExists(); !ok {
		t.Fatal(why)
	}
}
