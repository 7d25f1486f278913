package consensus

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/stratanet/strata/layers"
)

// The applied-map log: one line per committed map a member folds in
// ("map applied", with the Raft index) and one per state restored from a
// snapshot ("map restored"), each with the map's epoch and hash and the
// wall clock in microseconds. It is always on: a post-mortem reads from
// it which maps each member applied, in which order, and the testnet's
// history checker (testnet/history.go) parses it to prove that every
// member's applied maps are a prefix of one sequence with one map per
// epoch.

// Messages of the applied-map log lines.
const (
	LogMapApplied  = "map applied"
	LogMapRestored = "map restored"
)

// MapHash is a short, stable digest of a map's binary form (epoch,
// layers and stages): two maps with the same hash are the same map.
func MapHash(m layers.LayerMap) string {
	b, err := m.MarshalBinary()
	if err != nil {
		// An invalid map (none committed yet) still gets a hash, of its
		// epoch and layer count, so that the log line is never lost.
		b = []byte{byte(m.Epoch), byte(m.Epoch >> 8), byte(m.Layers)}
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// logMapApplied writes the line for a committed map folded in at Raft
// index idx.
func (f *feed) logMapApplied(idx uint64, m layers.LayerMap) {
	f.log.Infow(LogMapApplied, "epoch", m.Epoch, "index", idx, "hash", MapHash(m),
		"stages", len(m.Stages), "at_us", time.Now().UnixMicro())
}

// logMapRestored writes the line for a state restored from a snapshot.
func (f *feed) logMapRestored(s State) {
	m := s.Committed()
	f.log.Infow(LogMapRestored, "epoch", m.Epoch, "hash", MapHash(m),
		"stages", len(m.Stages), "at_us", time.Now().UnixMicro())
}
