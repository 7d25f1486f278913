//go:build faultinject

package consensus

import "os"

// EpochFaultEnv, set to "reuse" in a faultinject build's environment,
// breaks the epoch rule on purpose: every map after epoch 2 is proposed,
// and admitted, at the committed epoch instead of the next one, so that
// one epoch gets several different maps. The testnet's history checker
// must catch it (make nemesis-broken). Release builds have no such hook
// (epoch_release.go).
const EpochFaultEnv = "STRATA_FAULT_EPOCH"

var reuseEpoch = os.Getenv(EpochFaultEnv) == "reuse"

func nextEpoch(e uint64) uint64 {
	if reuseEpoch && e >= 2 {
		return e
	}
	return e + 1
}
