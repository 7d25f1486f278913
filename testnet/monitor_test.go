package testnet

import (
	"testing"

	"github.com/stratanet/strata/monitor"
)

// The class a node's own diagnosis gives, which the monitor's must match.
func TestWantReach(t *testing.T) {
	for _, c := range []struct {
		nr   NodeReach
		want string
	}{
		{NodeReach{Reachability: "public", Links: map[string]string{"n3": "hole-punched"}}, monitor.ReachDirect},
		{NodeReach{Reachability: "private", Links: map[string]string{"n1": "direct", "n4": "hole-punched"}}, monitor.ReachHolePunched},
		{NodeReach{Reachability: "private", Links: map[string]string{"n1": "direct", "n3": "relayed 3.2 MB/s"}}, monitor.ReachRelayed},
		{NodeReach{Reachability: "unknown"}, monitor.ReachUnknown},
	} {
		if got := wantReach(c.nr); got != c.want {
			t.Errorf("%+v: %s, want %s", c.nr, got, c.want)
		}
	}
}
