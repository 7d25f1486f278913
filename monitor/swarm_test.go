package monitor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/node"
	"github.com/stratanet/strata/swarm"
)

var modelPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "strata-monitor-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	c := engine.DefaultGenConfig()
	c.Layers, c.Seed = 8, 11
	modelPath = filepath.Join(dir, "tiny.gguf")
	if err := engine.GenerateFile(modelPath, c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var testHW = layers.Hardware{Name: "test-cpu", MemoryBytes: 1 << 30, MemBandwidth: 20e9, TFLOPS: 0.2}

// nodeOptions are real nodes on 127.0.0.1 serving the generated 8-layer
// model, at most 4 layers each, so that a swarm of three or four has
// every layer on one or two nodes.
func nodeOptions(extra ...node.Option) []node.Option {
	return append([]node.Option{
		node.WithModelFile(modelPath),
		node.WithHardware(testHW),
		node.WithLogger(zap.NewNop()),
		node.WithThreads(1),
		node.WithMaxLayers(4),
		node.WithStepTimeout(3 * time.Second),
		node.WithRepairWait(5 * time.Second),
		node.WithStatusInterval(50 * time.Millisecond),
		node.WithSwarmOptions(
			swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"),
			swarm.WithReachability(swarm.ReachabilityPublic),
			swarm.WithDiscovery(false),
			swarm.WithHeartbeatInterval(100*time.Millisecond),
			swarm.WithRTTSampling(200*time.Millisecond, 4),
		),
		node.WithConsensusOptions(
			consensus.WithRaftTimeouts(150*time.Millisecond, 150*time.Millisecond),
			consensus.WithTick(25*time.Millisecond),
			consensus.WithWarmup(10*time.Second, 10*time.Second),
			consensus.WithRebalance(0, layers.RebalanceOptions{}),
			consensus.WithVoters(3, 0),
			consensus.WithRPCTimeout(2*time.Second),
		),
	}, extra...)
}

// waitUntil looks again every 20 ms until cond holds, failing past limit.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testSwarm is three public nodes and one that listens nowhere, reachable
// through the others' relays only, all serving and placed.
type testSwarm struct {
	nodes   []*node.Node
	relayed *node.Node
}

func startSwarm(t *testing.T) *testSwarm {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := &testSwarm{}
	t.Cleanup(func() {
		for _, n := range s.nodes {
			n.Close()
		}
	})
	for i := range 4 {
		var extra []node.Option
		if i > 0 {
			extra = append(extra, node.WithBootstrap(s.nodes[0].AddrInfo()))
		}
		if i == 3 {
			// Behind NAT: no listen address, so that the host
			// advertises its relay reservations only.
			extra = append(extra, node.WithSwarmOptions(swarm.WithNoListen(), swarm.WithReachability(swarm.ReachabilityPrivate)))
		}
		n, err := node.New(ctx, nodeOptions(extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range s.nodes {
			if err := n.Connect(ctx, p.AddrInfo()); err != nil {
				t.Fatal(err)
			}
		}
		s.nodes = append(s.nodes, n)
	}
	s.relayed = s.nodes[3]
	waitUntil(t, 60*time.Second, "every node placed, serving, on one epoch", func() bool {
		m := s.nodes[0].Committed()
		for _, n := range s.nodes {
			st := n.Swarm().Self
			if _, in := m.Range(n.ID().String()); !in || st.State != swarm.StateServing || st.Epoch != m.Epoch ||
				n.Committed().Epoch != m.Epoch {
				return false
			}
		}
		return true
	})
	waitUntil(t, 30*time.Second, "a relay reservation for the relayed node", func() bool {
		addrs := s.relayed.Swarm().Addrs
		for _, a := range addrs {
			if !swarm.IsRelayAddr(a) {
				return false
			}
		}
		return len(addrs) > 0
	})
	for _, n := range s.nodes {
		if err := n.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// perLayer expands runs to a count per layer.
func perLayer(c Coverage) []int {
	var out []int
	for _, r := range c.Runs {
		for range r.End - r.Start {
			out = append(out, r.Nodes)
		}
	}
	return out
}

// TestMonitorSwarm: strata monitor's report (/api/swarms, as served)
// lists a real 4-node swarm, one of whose members is reachable through
// relays only, with the coverage the nodes announce, every node signed,
// the three public nodes direct and the NAT'd one relayed (asked through
// a member), and the tokens the entry served.
func TestMonitorSwarm(t *testing.T) {
	s := startSwarm(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := s.nodes[0].Complete(ctx, node.Request{Prompt: "Once upon a time", MaxTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	served := uint64(len(res.Tokens))
	waitUntil(t, 10*time.Second, "the entry's status counts its tokens", func() bool {
		return s.nodes[0].Swarm().Self.TokensServed == served
	})

	m, err := New(ctx, WithBootstrap(s.nodes[0].AddrInfo()), WithoutDHT(), WithLimits(64, 5*time.Second, 4))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	svc := NewService(m)
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()

	var rep Report
	// The entry's heartbeat with the served tokens goes out within an
	// interval of its status; crawl until it has.
	waitUntil(t, 20*time.Second, "a crawl that sees the served tokens", func() bool {
		if _, err := svc.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		rep = getReport(t, srv.URL)
		for _, sw := range rep.Swarms {
			for _, n := range sw.Nodes {
				if n.ID == s.nodes[0].ID().String() {
					return n.TokensServed == served
				}
			}
		}
		return false
	})
	if len(rep.Swarms) != 1 {
		t.Fatalf("%d swarms: %+v", len(rep.Swarms), rep.Swarms)
	}
	sw := rep.Swarms[0]
	info := s.nodes[0].Model()
	if sw.Name != swarm.DefaultSwarmName || sw.Model != info.Name || sw.Fingerprint != info.Fingerprint || sw.Layers != 8 {
		t.Errorf("swarm %q model %q (%s) of %d layers", sw.Name, sw.Model, sw.Fingerprint, sw.Layers)
	}
	// The oracle: the layers package's count over the committed map,
	// on which every node serves (checked at start).
	if want := s.nodes[0].Committed().Coverage(); !slices.Equal(perLayer(sw.Coverage), want) || !sw.Coverage.Covered ||
		sw.Coverage.Min != slices.Min(want) || sw.Coverage.Max != slices.Max(want) || !slices.Equal(perLayer(sw.MapCoverage), want) {
		t.Errorf("coverage %+v (map %+v), the committed map's %v", sw.Coverage, sw.MapCoverage, want)
	}
	if cm := s.nodes[0].Committed(); sw.MapEpoch != cm.Epoch {
		t.Errorf("map epoch %d, committed %d", sw.MapEpoch, cm.Epoch)
	}
	if sw.Verified != 4 || len(sw.Nodes) != 4 {
		t.Fatalf("%d verified of %d nodes: %+v", sw.Verified, len(sw.Nodes), sw.Nodes)
	}
	for _, n := range sw.Nodes {
		want, via := ReachDirect, false
		if n.ID == s.relayed.ID().String() {
			want, via = ReachRelayed, true
		}
		if n.Reachability != want || (n.Via != "") != via || !n.Verified || n.State != "serving" {
			t.Errorf("node %s: %s via %q verified %v state %s; want %s, via a member %v (error %q)",
				n.ID, n.Reachability, n.Via, n.Verified, n.State, want, via, n.Error)
		}
	}
	var text strings.Builder
	if err := WriteText(&text, rep.Swarms); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"every layer covered", "relayed", "via "} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, text.String())
		}
	}
	t.Logf("monitor table:\n%s", text.String())
}

func getReport(t *testing.T, base string) Report {
	t.Helper()
	resp, err := http.Get(base + "/api/swarms")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep Report
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	return rep
}
