//go:build faultinject

package cli

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/stratanet/strata/node"
)

// faultOptions reads STRATA_FAULT_INJECT ("MODE:EVERY", such as
// "flip:50"): this test build's node then corrupts one output in EVERY.
// Release builds have no such hook (fault_release.go).
func faultOptions() ([]node.Option, error) {
	v, ok := os.LookupEnv(faultEnv)
	if !ok || v == "" {
		return nil, nil
	}
	mode, every, _ := strings.Cut(v, ":")
	n, err := strconv.Atoi(every)
	if err != nil || n <= 0 {
		return nil, fmt.Errorf("%s=%q: want MODE:EVERY, such as flip:50", faultEnv, v)
	}
	modes := map[string]node.FaultMode{"flip": node.FaultFlip, "stale": node.FaultStale, "negate": node.FaultNegate,
		"sendflip": node.FaultSendFlip}
	m, ok := modes[mode]
	if !ok {
		return nil, fmt.Errorf("%s=%q: mode is one of flip, stale, negate, sendflip", faultEnv, v)
	}
	return []node.Option{node.WithFaultInjection(node.FaultSpec{Every: n, Mode: m})}, nil
}
