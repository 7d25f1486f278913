package consensus

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
)

// sybilCount is how many non-steward members join the steward cluster:
// the 20 Sybils.
const sybilCount = 20

// TestStewardsSybilCluster: three stewards found a real swarm (libp2p on
// loopback, real Raft) and the founder signs them in; twenty more nodes
// join, with room for five voters, and none of them ever becomes a voter
// (checked in every configuration each member's Raft log holds). When
// the leader steward dies, another steward leads. Forged steward sets
// (signed by a Sybil, tampered with, replayed from another swarm),
// appended straight to Raft past the leader's own check, are refused by
// every member's fold.
func TestStewardsSybilCluster(t *testing.T) {
	cl := newCluster(t)
	var stewards []*testNode
	var ids []peer.ID
	var names []string
	var boot []peer.AddrInfo
	for range 3 {
		n := cl.addHost(false)
		stewards = append(stewards, n)
		ids, names, boot = append(ids, n.h.ID()), append(names, n.id()), append(boot, n.info())
	}
	for _, n := range stewards {
		cl.start(n, WithInitialVoters(ids...), WithBootstrap(boot...), WithStewards(names...))
	}
	cl.leader(10 * time.Second)
	cl.waitAll("steward set applied", 20*time.Second, func(s State) bool {
		return slices.Equal(s.Stewards().List(), slices.Sorted(slices.Values(names)))
	})

	var sybils []*testNode
	for range sybilCount {
		n := cl.addHost(false)
		sybils = append(sybils, n)
		// A Sybil may name itself a steward: only the founder's
		// signature makes a first set, and the swarm has one.
		cl.start(n, WithBootstrap(boot...), WithStewards(n.id()))
	}
	total := len(stewards) + len(sybils)
	took := cl.waitAll("every Sybil a member and a Raft server", 60*time.Second, func(s State) bool {
		return s.Len() == total && cl.serversNow() == total
	})
	t.Logf("%d Sybils joined %d stewards in %v", sybilCount, len(stewards), took.Round(time.Millisecond))
	cl.waitAll("a map that covers the model", 60*time.Second, func(s State) bool { return s.Committed().Covers() })
	l := cl.currentLeader(10 * time.Second)
	if !slices.Contains(names, l.id()) {
		t.Fatalf("leader %s is no steward", l.id())
	}
	if v := cl.voters(l); len(v) != 3 || !subset(v, names) {
		t.Fatalf("voters %v, want the three stewards", v)
	}

	// The leader steward dies: a steward leads the next term, the dead one
	// leaves, and still no Sybil votes.
	term := l.c().rn.raft.CurrentTerm()
	l.kill()
	next := cl.leaderAfter(term, 20*time.Second)
	if !slices.Contains(names, next.id()) {
		t.Fatalf("after the steward leader died, %s leads: no steward", next.id())
	}
	cl.waitAll("the dead steward removed", 30*time.Second, func(s State) bool {
		return !s.IsMember(l.id()) && cl.serversNow() == total-1
	})
	if v := cl.voters(next); len(v) == 0 || !subset(v, names) {
		t.Fatalf("voters %v after a steward died: not all stewards", v)
	}

	// Forged sets, each for seq 2 so that only the signature can refuse
	// it, go to Raft directly: what every member's fold does with them is
	// the test.
	s := next.c().State()
	evil := sybils[0]
	bySybil := mustSign(t, s, []string{evil.id()}, evil.key)
	good := mustSign(t, s, names, next.key)
	tampered := good
	tampered.Stewards = slices.Sorted(slices.Values([]string{next.id(), evil.id()}))
	// The same steward, signing for another swarm: one it founded, with
	// another model, at another time, that has its own first set.
	otherSwarm := Fold(Record{At: time.Now(), Event: NodeJoined{Node: next.id(), Caps: testCaps(t), Fingerprint: "sha256:other"}})
	otherSwarm = mustApply(t, otherSwarm, Record{At: time.Now(), Event: mustSign(t, otherSwarm, []string{next.id()}, next.key)})
	replayed := mustSign(t, otherSwarm, []string{next.id(), evil.id()}, next.key)
	if replayed.Seq != 2 || tampered.Seq != 2 || bySybil.Seq != 2 {
		t.Fatalf("forged sets of seq %d %d %d, want 2", replayed.Seq, tampered.Seq, bySybil.Seq)
	}
	for name, e := range map[string]StewardsSet{"signed by a Sybil": bySybil, "tampered list": tampered, "replayed from another swarm": replayed} {
		b, err := MarshalRecord(Record{At: time.Now(), Event: e})
		if err != nil {
			t.Fatal(err)
		}
		f := cl.applyAtLeader(b, 20*time.Second)
		if err := f.Error(); err != nil {
			t.Fatalf("%s: raft: %v", name, err)
		}
		if err, _ := f.Response().(error); !errors.Is(err, ErrBadStewards) {
			t.Fatalf("%s: the leader's fold says %v, want ErrBadStewards", name, err)
		}
		idx := f.Index()
		cl.await(name+": folded everywhere", 20*time.Second, func() bool {
			for _, n := range cl.alive() {
				if n.c().fsm.index.Load() < idx {
					return false
				}
			}
			return true
		})
		for _, n := range cl.alive() {
			if st := n.c().State(); st.Stewards().Seq() != 1 || !slices.Equal(st.Stewards().List(), slices.Sorted(slices.Values(names))) {
				t.Fatalf("%s: member %s has stewards %v seq %d", name, shortID(n.h.ID()), st.Stewards().List(), st.Stewards().Seq())
			}
		}
	}

	// No configuration any member's Raft log holds ever made a Sybil a
	// voter.
	for _, n := range cl.alive() {
		checkVotersInLog(t, n, names)
	}
}

// checkVotersInLog fails if a configuration entry in n's Raft log, or
// its current configuration, has a voter outside allowed.
func checkVotersInLog(t *testing.T, n *testNode, allowed []string) {
	t.Helper()
	logs := n.c().rn.st.logs
	first, err := logs.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	configs := 0
	for i := first; i <= last && i > 0; i++ {
		var e raft.Log
		if err := logs.GetLog(i, &e); err != nil {
			t.Fatalf("log %d: %v", i, err)
		}
		if e.Type != raft.LogConfiguration {
			continue
		}
		configs++
		for _, sv := range raft.DecodeConfiguration(e.Data).Servers {
			if sv.Suffrage == raft.Voter && !slices.Contains(allowed, string(sv.ID)) {
				t.Fatalf("%s's log %d makes %s a voter", shortID(n.h.ID()), i, sv.ID)
			}
		}
	}
	if configs < sybilCount {
		t.Fatalf("%s's log holds %d configurations, fewer than the %d Sybil joins", shortID(n.h.ID()), configs, sybilCount)
	}
	cur, err := n.c().Servers()
	if err != nil {
		t.Fatal(err)
	}
	for _, sv := range cur {
		if sv.Voter && !slices.Contains(allowed, sv.ID.String()) {
			t.Fatalf("%s's configuration makes %s a voter", shortID(n.h.ID()), sv.ID)
		}
	}
}

// serversNow counts the servers in the configuration of a live leader,
// without waiting for one (0: none leads now).
func (cl *cluster) serversNow() int {
	for _, n := range cl.alive() {
		if n.c().IsLeader() {
			if sv, err := n.c().Servers(); err == nil {
				return len(sv)
			}
		}
	}
	return 0
}

func subset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// TestStewardsFoundingRace: twenty nodes that name themselves stewards
// send their joins while the founder is still starting. A join request
// that reached the leader before its own join used to become the swarm's
// first record, making a stranger the senior member and so the signer of
// the first set (it did so in 5 of 5 runs). Now the founder's join and
// its set come before anyone else's join.
func TestStewardsFoundingRace(t *testing.T) {
	cl := newCluster(t)
	founder := cl.addHost(false)
	cl.start(founder, WithStewards(founder.id()))
	for range sybilCount {
		n := cl.addHost(false)
		cl.start(n, WithBootstrap(founder.info()), WithStewards(n.id()))
	}
	cl.waitAll("every node a member of a swarm with stewards", 30*time.Second, func(s State) bool {
		return !s.Stewards().Empty() && s.Len() == sybilCount+1
	})
	for _, n := range cl.alive() {
		s := n.c().State()
		if f, _ := s.Founder(); f.ID != founder.id() || !slices.Equal(s.Stewards().List(), []string{founder.id()}) {
			t.Fatalf("%s: founder %s, stewards %v; want %s for both", shortID(n.h.ID()), f.ID, s.Stewards().List(), founder.id())
		}
	}
	// In the log, nobody's join but the founder's (its own request may
	// repeat it) comes before its set.
	logs := founder.c().rn.st.logs
	last, err := logs.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	set := false
	for i := uint64(1); i <= last && !set; i++ {
		var e raft.Log
		if err := logs.GetLog(i, &e); err != nil {
			t.Fatal(err)
		}
		if e.Type != raft.LogCommand {
			continue
		}
		r, err := UnmarshalRecord(e.Data)
		if err != nil {
			t.Fatal(err)
		}
		switch ev := r.Event.(type) {
		case NodeJoined:
			if ev.Node != founder.id() {
				t.Fatalf("record %d: %s joined before the founder's steward set", i, ev.Node)
			}
		case StewardsSet:
			set = true
		}
	}
	if !set {
		t.Fatal("no steward set in the founder's log")
	}
}
