package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stratanet/strata/node/weights"
	"github.com/stratanet/strata/swarm"
)

// The weights unit's errors reach callers and peers under the node's
// sentinels, with the texts they had when the unit was part of package
// node (the literals below are those texts).
func TestWeightsErrorsAsNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := swarm.New(ctx, swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"), swarm.WithDiscovery(false))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	w := weights.NewServer(weights.ServerConfig{Net: h.Streams(), Fingerprint: "sha256:mine"})
	answer := func(req string) error {
		_, err := w.AnswerManifest([]byte(req))
		return weightsErr(err)
	}
	cases := []struct {
		err      error
		sentinel error
		text     string
	}{
		{answer("SMP1"), ErrBadFrame, "node: bad activation frame: truncated manifest page offset (at byte 4)"},
		{answer("SMF1sha256:other"), ErrUnknownModel, "node: unknown model: model sha256:other, this node serves sha256:mine"},
		{answer("SMF1"), ErrNotServing, "node: layers not served: no manifest of the model here yet"},
		{func() error { _, err := SwarmModel(ctx, nil); return err }(), ErrConfig,
			"node: invalid configuration: no bootstrap peers to ask for the swarm's model"},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.sentinel) || c.err.Error() != c.text {
			t.Errorf("error %q (is %v: %v), want %q", c.err, c.sentinel, errors.Is(c.err, c.sentinel), c.text)
		}
	}
	if !errors.Is(cases[0].err, weights.ErrBadFrame) {
		t.Errorf("%v does not wrap the package's own sentinel", cases[0].err)
	}
	if weightsErr(nil) != nil {
		t.Error("no error became one")
	}
}
