//go:build !faultinject

package consensus

// nextEpoch is the epoch of the map proposed after the committed one at
// epoch e. A faultinject build can break it (epoch_faultinject.go).
func nextEpoch(e uint64) uint64 { return e + 1 }
