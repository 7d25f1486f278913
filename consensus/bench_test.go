package consensus

import (
	"fmt"
	"testing"
	"time"

	"github.com/stratanet/strata/layers"
)

// BenchmarkFold: one warmup cycle (proposal, readies, commit) on a state
// of 64 members.
func BenchmarkFold(b *testing.B) {
	caps := testCaps(b)
	var s State
	var ids []string
	for i := range 64 {
		id := fmt.Sprintf("node-%02d", i)
		ids = append(ids, id)
		s, _ = s.Apply(rec(i, NodeJoined{Node: id, Caps: caps, Fingerprint: "fp"}))
	}
	const L = 80
	b.ReportAllocs()
	for b.Loop() {
		epoch := s.Committed().Epoch + 1
		var stages []layers.Stage
		for i, id := range ids {
			start := (i + int(epoch)) % (L - 10)
			stages = append(stages, st(id, start, start+10))
		}
		stages[0] = st(ids[0], 0, L) // one node covers everything
		m, err := layers.NewLayerMap(L, epoch, stages...)
		if err != nil {
			b.Fatal(err)
		}
		s, err = s.Apply(rec(0, MapProposed{Map: m}))
		if err != nil {
			b.Fatal(err)
		}
		p, _ := s.Pending()
		for _, id := range p.Waiting() {
			r, _ := m.Range(id)
			s, _ = s.Apply(rec(0, StageReady{Node: id, Epoch: epoch, Range: r}))
		}
		if s, err = s.Apply(rec(0, MapCommitted{Epoch: epoch})); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRecordCodec(b *testing.B) {
	recs := sampleRecords(b)
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range recs {
			p, err := MarshalRecord(r)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := UnmarshalRecord(p); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkCommit3: the latency of one Raft commit on a 3-voter cluster
// over libp2p on loopback (the record is refused by the fold, which costs
// nothing; the round trip is the same).
func BenchmarkCommit3(b *testing.B) {
	cl := newCluster(b)
	a := cl.addHost(false)
	cl.start(a)
	for range 2 {
		n := cl.addHost(false)
		cl.start(n, WithBootstrap(a.info()))
	}
	l, _ := cl.leader(5 * time.Second)
	cl.waitAll("three voters", 10*time.Second, func(State) bool { return len(cl.voters(l)) == 3 })
	rec, err := MarshalRecord(Record{At: time.Now(), Event: MapCommitted{Epoch: 1 << 40}})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := l.c().rn.raft.Apply(rec, time.Second).Error(); err != nil {
			b.Fatal(err)
		}
	}
}
