package ggml_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/ggml"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/node"
	"github.com/stratanet/strata/node/api"
	"github.com/stratanet/strata/swarm"
)

// TestMixedSwarm: a swarm of two real nodes on loopback (libp2p, Raft,
// the real forward pass), one on the pure-Go engine and one computing its
// layers through ggml's CPU device, each holding half of an F32 model,
// serves a completion through the API on two hops. The swarm view shows
// each node's engine, the ggml node measured its capabilities through
// ggml, and the greedy tokens are those of a single-process go run: on
// F32 ggml agrees with the go engine to about 1e-5 of the logits' scale,
// far below the gap between the two best logits of this model's steps
// (the test checks that gap, so that a tie could not pass for a bug or a
// bug for a tie).
func TestMixedSwarm(t *testing.T) {
	mixedSwarm(t, ggml.CPU)
}

// TestVulkanMixedSwarm: TestMixedSwarm with the ggml node on the Vulkan
// device (make test-vulkan: Mesa's lavapipe), so that its layers' weights,
// KV caches and hidden states go through device buffers and copies.
func TestVulkanMixedSwarm(t *testing.T) {
	dir := os.Getenv(ggml.VulkanLibEnv)
	if dir == "" {
		t.Skipf("%s not set: make test-vulkan builds ggml-vulkan and runs this on Mesa's lavapipe", ggml.VulkanLibEnv)
	}
	if os.Getenv("GGML_VK_VISIBLE_DEVICES") == "" {
		os.Setenv("GGML_VK_VISIBLE_DEVICES", "0") // lavapipe is a CPU-type device, which ggml-vulkan leaves out unless selected
	}
	ggml.LoadLibDir(dir)
	if d, err := ggml.Probe(ggml.GPU); err != nil || !strings.HasPrefix(d.Name, "Vulkan") {
		t.Fatalf("the GPU device after loading %s: %+v, %v; want a Vulkan one", dir, d, err)
	}
	mixedSwarm(t, ggml.GPU)
}

// mixedSwarm runs TestMixedSwarm's swarm with the ggml node on device d.
func mixedSwarm(t *testing.T, d ggml.Device) {
	c := engine.DefaultGenConfig()
	c.Layers, c.Seed = 4, 5
	path := filepath.Join(t.TempDir(), "mixed-f32.gguf")
	if err := engine.GenerateFile(path, c); err != nil {
		t.Fatal(err)
	}
	dev, err := ggml.Probe(d)
	if err != nil {
		t.Fatal(err)
	}
	// Every stage the ggml node opens must be a ggml one; it loads its
	// range as one (Ranges), as bin/strata-ggml's nodes do.
	var opened, ranges atomic.Int32
	open := ggml.Opener(d)
	eng := node.Engine{Name: dev.Engine(), Memory: dev.Memory, Ranges: true, Open: func(path string, lo, hi, threads int) (engine.Stage, error) {
		st, err := open(path, lo, hi, threads)
		if err == nil {
			opened.Add(1)
			if hi-lo > 1 {
				ranges.Add(1)
			}
			if got := st.Info().Engine; got != dev.Engine() {
				t.Errorf("a stage of engine %q, want %q", got, dev.Engine())
			}
		}
		return st, err
	}}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := func(extra ...node.Option) []node.Option {
		return append([]node.Option{
			node.WithModelFile(path),
			node.WithDataDir(t.TempDir()), // measured capabilities (no declared device)
			node.WithMemory(1 << 30),
			node.WithLogger(zap.NewNop()),
			node.WithThreads(1),
			node.WithMaxLayers(2), // each node half the model: two hops
			node.WithStatusInterval(50 * time.Millisecond),
			node.WithSwarmOptions(
				swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"),
				swarm.WithReachability(swarm.ReachabilityPublic),
				swarm.WithDiscovery(false),
				swarm.WithHeartbeatInterval(100*time.Millisecond),
			),
			node.WithConsensusOptions(
				consensus.WithRaftTimeouts(150*time.Millisecond, 150*time.Millisecond),
				consensus.WithTick(25*time.Millisecond),
				consensus.WithWarmup(10*time.Second, 10*time.Second),
				consensus.WithRebalance(0, layers.RebalanceOptions{}),
				consensus.WithRPCTimeout(2*time.Second),
			),
		}, extra...)
	}
	goNode, err := node.New(ctx, opts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer goNode.Close()
	ggNode, err := node.New(ctx, opts(node.WithEngine(eng), node.WithBootstrap(goNode.AddrInfo()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer ggNode.Close()
	nodes := []*node.Node{goNode, ggNode}
	for _, nd := range nodes {
		if err := nd.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var urls []string
	for _, nd := range nodes {
		s, err := api.New(api.NodeBackend(nd), api.WithLogger(zap.NewNop()))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		addr, err := s.Start("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, "http://"+addr.String())
	}

	// The swarm view, from either node, shows both engines once each
	// node has heard the other's heartbeat.
	want := map[string]string{goNode.ID().String(): engine.EngineGo, ggNode.ID().String(): eng.Name}
	var view struct {
		Committed layers.LayerMap `json:"committed"`
		Members   []struct {
			ID           string `json:"id"`
			Engine       string `json:"engine"`
			Capabilities *struct {
				Hardware layers.Hardware
			} `json:"capabilities"`
		} `json:"members"`
	}
	for _, u := range urls {
		for {
			getJSON(t, u+"/v1/swarm", &view)
			got := map[string]string{}
			for _, m := range view.Members {
				got[m.ID] = m.Engine
			}
			if fmt.Sprint(got) == fmt.Sprint(want) && view.Committed.Covers() {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: engines %v, want %v; map %v", u, got, want, view.Committed)
			case <-time.After(50 * time.Millisecond):
			}
		}
		for _, m := range view.Members {
			r, ok := view.Committed.Range(m.ID)
			if !ok || r.End-r.Start != 2 {
				t.Fatalf("member %s (%s) holds %v of %v: want half the model each", m.ID, m.Engine, r, view.Committed)
			}
			if m.ID == ggNode.ID().String() && (m.Capabilities == nil || m.Capabilities.Hardware.Name != "measured-"+eng.Name) {
				t.Fatalf("the ggml node's capabilities %+v: want measured through ggml", m.Capabilities)
			}
		}
	}

	// The reference: the whole model in one process on the go engine,
	// greedy, with each step's gap between its two best logits.
	const prompt, maxTokens = "Once upon a time", 16
	refTokens, minGap := reference(t, path, prompt, maxTokens)
	if minGap < 1e-3 {
		t.Fatalf("the reference's closest call has a logit gap of %.2g: too close for F32 agreement to decide", minGap)
	}
	for i, nd := range nodes {
		res, err := nd.Complete(ctx, node.Request{Prompt: prompt, MaxTokens: maxTokens})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Tokens, refTokens) {
			t.Fatalf("entry %d: tokens %v, single-process go %v", i, res.Tokens, refTokens)
		}
		body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": maxTokens, "temperature": 0})
		var out struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Strata struct {
				Paths []string `json:"paths"`
			} `json:"strata"`
		}
		postJSON(t, urls[i]+"/v1/completions", body, &out)
		if len(out.Choices) != 1 || out.Choices[0].Text != res.Text || out.Usage.CompletionTokens != len(refTokens) {
			t.Fatalf("API of entry %d: %+v; in process %q (%d tokens)", i, out, res.Text, len(refTokens))
		}
		if len(out.Strata.Paths) == 0 || !strings.Contains(out.Strata.Paths[0], "→") {
			t.Fatalf("paths %v: want two hops", out.Strata.Paths)
		}
	}
	// One layer measured, and the two it serves as one stage.
	if n, r := opened.Load(), ranges.Load(); n != 2 || r != 1 {
		t.Fatalf("the ggml node opened %d ggml stages, %d over its range", n, r)
	}
	t.Logf("%d tokens through go and %s hops equal the single-process go run's; closest greedy call: logit gap %.3g",
		len(refTokens), eng.Name, minGap)
}

// reference generates greedily on the go engine in one process, as
// `strata generate` does, and returns the tokens and the smallest gap
// between the best and second-best logit over the steps.
func reference(t *testing.T, path, prompt string, maxTokens int) ([]int32, float64) {
	t.Helper()
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
	var out []int32
	gap := math.Inf(1)
	logits, err := s.Step(context.Background(), ids)
	for err == nil && len(out) < maxTokens {
		best, second := int32(0), float32(math.Inf(-1))
		for i, v := range logits {
			switch {
			case v > logits[best]:
				best, second = int32(i), logits[best]
			case int32(i) != best && v > second:
				second = v
			}
		}
		gap = min(gap, float64(logits[best]-second))
		out = append(out, best)
		if tok.IsEnd(best) {
			break
		}
		logits, err = s.Step(context.Background(), []int32{best})
	}
	if err != nil {
		t.Fatal(err)
	}
	return out, gap
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	decode(t, resp, v)
}

func postJSON(t *testing.T, url string, body []byte, v any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	decode(t, resp, v)
}

func decode(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %s", resp.Request.URL, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v in %s", resp.Request.URL, err, b)
	}
}
