package node

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/swarm"
)

// Test timings: short, with margin for two shared cores.
const (
	testHeartbeat = 100 * time.Millisecond
	testRaft      = 300 * time.Millisecond
	testTick      = 25 * time.Millisecond
)

// testHW is the declared device of every test node: real-engine nodes
// skip the start-up benchmark so that plans do not depend on the load of
// the machine running the tests.
var testHW = layers.Hardware{Name: "test-cpu", MemoryBytes: 1 << 30, MemBandwidth: 20e9, TFLOPS: 0.2}

var (
	modelOnce sync.Once
	modelPath string
	modelDir  string
)

// testModel is an 8-layer, 64-wide generated model, written once per
// test binary.
func testModel(t testing.TB) string {
	t.Helper()
	modelOnce.Do(func() {
		dir, err := mkTemp()
		if err != nil {
			t.Fatal(err)
		}
		modelDir = dir
		c := engine.DefaultGenConfig()
		c.Layers, c.Seed = 8, 11
		modelPath = filepath.Join(dir, "tiny.gguf")
		if err := engine.GenerateFile(modelPath, c); err != nil {
			t.Fatal(err)
		}
	})
	if modelPath == "" {
		t.Fatal("no test model")
	}
	return modelPath
}

// testLogger logs everything from Info up with -v; otherwise warnings and
// the consensus leader's actions (what it proposed, appended, committed,
// which servers it changed), so that a failed run's log says what the
// leader did. (A CI series run that failed waiting for a repair had only
// warnings to go on.)
func testLogger(t testing.TB) *zap.Logger {
	if testing.Verbose() {
		return zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	}
	return zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel),
		zaptest.WrapOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return leaderCore{c} })))
}

// leaderCore passes warnings and above, and the consensus logger's Info.
type leaderCore struct{ zapcore.Core }

func (c leaderCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Level < zap.WarnLevel && e.LoggerName != "consensus" {
		return ce
	}
	return c.Core.Check(e, ce)
}

func (c leaderCore) With(fields []zapcore.Field) zapcore.Core { return leaderCore{c.Core.With(fields)} }

// testCluster is a set of real nodes on 127.0.0.1.
type testCluster struct {
	t     testing.TB
	mu    sync.Mutex
	nodes []*Node
	base  []Option
}

func newTestCluster(t testing.TB, base ...Option) *testCluster {
	c := &testCluster{t: t, base: base}
	t.Cleanup(func() {
		for _, n := range c.all() {
			n.Close()
		}
	})
	return c
}

func (c *testCluster) all() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.nodes)
}

func baseOptions(t testing.TB) []Option {
	return []Option{
		WithModelFile(testModel(t)),
		WithHardware(testHW),
		WithLogger(testLogger(t)),
		WithThreads(1),
		WithStepTimeout(3 * time.Second),
		WithRepairWait(10 * time.Second),
		WithStatusInterval(50 * time.Millisecond),
		WithSwarmOptions(
			swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"),
			swarm.WithReachability(swarm.ReachabilityPublic),
			swarm.WithDiscovery(false),
			swarm.WithHeartbeatInterval(testHeartbeat),
			swarm.WithRTTSampling(200*time.Millisecond, 4),
		),
		WithConsensusOptions(
			consensus.WithRaftTimeouts(testRaft, testRaft),
			consensus.WithTick(testTick),
			consensus.WithWarmup(10*time.Second, 10*time.Second),
			consensus.WithRebalance(0, layers.RebalanceOptions{}),
			consensus.WithVoters(3, 0),
			consensus.WithRPCTimeout(2*time.Second),
		),
	}
}

// add starts a node that bootstraps through the cluster's first node
// and connects to every other.
func (c *testCluster) add(opts ...Option) *Node {
	t := c.t
	t.Helper()
	all := c.all()
	o := append(baseOptions(t), c.base...)
	if len(all) > 0 {
		o = append(o, WithBootstrap(all[0].host.AddrInfo()))
	}
	o = append(o, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := New(ctx, o...)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range all {
		if err := n.host.Connect(ctx, p.host.AddrInfo()); err != nil && p.ctx.Err() == nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	return n
}

// waitFor waits until cond holds, looking again every 20 ms, and fails
// the test past limit (generous: it is no latency bound). For states that
// no event announces as one (routing over the map, the peer table and
// heartbeats together).
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(limit)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			if !cond() {
				t.Fatalf("%s: not within %v", what, limit)
			}
		}
	}
	return time.Since(start)
}

// waitServing waits until every node's committed map places all of ids
// and every node can route.
func (c *testCluster) waitServing(limit time.Duration, ids ...peer.ID) {
	c.t.Helper()
	waitFor(c.t, limit, "a committed map placing every node, each heard by every node", func() bool {
		for _, n := range c.all() {
			if n.ctx.Err() != nil {
				continue
			}
			m := n.Committed()
			for _, id := range ids {
				if _, ok := m.Range(id.String()); !ok {
					return false
				}
			}
			if _, err := n.paths.route(routeReq{prompt: 1, max: 1}); err != nil {
				return false
			}
			// Spot checks take a peer for the go engine only once its
			// heartbeat says so (Node.reproducible).
			for _, id := range ids {
				if p, ok := n.host.Peers().Get(id); id != n.self && (!ok || p.Heartbeat == nil) {
					return false
				}
			}
		}
		return true
	})
}

// reference generates with the single-process pipeline, as
// `strata generate` does.
func reference(t testing.TB, prompt string, maxTokens int, sp engine.SamplingParams) []int32 {
	t.Helper()
	path := testModel(t)
	tok, err := engine.LoadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := engine.OpenPipeline(path, nil, engine.WithThreads(1))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ids := tok.Encode(prompt, true, false)
	s, err := p.NewSession(len(ids) + maxTokens)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.Generate(context.Background(), ids, maxTokens, sp, tok.IsEnd, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var errMismatch = errors.New("tokens differ from the single-process run")

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func engineGreedy() engine.SamplingParams { return engine.SamplingParams{} }

func isConfig(err error) bool { return errors.Is(err, ErrConfig) }
