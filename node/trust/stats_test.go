package trust

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestCountersLogs: Log holds the checks up to the first mismatch and
// stops there; Mismatched holds every mismatch, the first and those
// after it, so that a dispute found after the first one is still seen.
func TestCountersLogs(t *testing.T) {
	honest, liar, other := peer.ID("honest"), peer.ID("liar"), peer.ID("other")
	at := time.Unix(1e9, 0)
	var c Counters
	check := func(hop, checker peer.ID, mismatch bool, links int) {
		at = at.Add(time.Second)
		c.Conclusive(at, SessionID{1}, hop, checker, 4, 1, mismatch, false, links)
	}
	check(honest, other, false, 1)
	check(honest, liar, true, 1) // the liar as checker: the first mismatch
	check(other, honest, false, 1)
	check(liar, other, true, 2) // the liar's own hop, by a chain
	s := c.Stats()
	if len(s.Log) != 2 || !s.Log[1].Mismatch || s.Log[1].Hop != honest || !s.FirstMismatch.Equal(s.Log[1].At) || s.CheckedAtFirstMismatch != 8 {
		t.Fatalf("log %+v, first mismatch %v at %d checked: want the two checks up to the first mismatch", s.Log, s.FirstMismatch, s.CheckedAtFirstMismatch)
	}
	if len(s.Mismatched) != 2 || s.Mismatched[0].Hop != honest || s.Mismatched[1].Hop != liar || s.Mismatched[1].Links != 2 {
		t.Fatalf("mismatched %+v: want both mismatches in order", s.Mismatched)
	}
	if s.Verified != 2 || s.Mismatches != 2 || s.Checked != 16 || s.Positions != 8 {
		t.Fatalf("counts %+v", s)
	}
	for range maxCheckLog + 10 {
		check(liar, other, true, 1)
	}
	if s := c.Stats(); len(s.Mismatched) != maxCheckLog || len(s.Log) != 2 {
		t.Fatalf("%d mismatches kept, log %d: want at most %d and the log unchanged", len(s.Mismatched), len(s.Log), maxCheckLog)
	}
}
