package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/node"
	"github.com/stratanet/strata/swarm"
)

// The tests drive real nodes: a swarm of in-process nodes on 127.0.0.1
// serving a generated 8-layer model, each node capped at 4 layers so
// that every path has two hops. The 3-node swarm most tests share is
// started once per test binary (see TestMain).

var testHW = layers.Hardware{Name: "test-cpu", MemoryBytes: 1 << 30, MemBandwidth: 20e9, TFLOPS: 0.2}

var (
	modelDir  string
	modelPath string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "strata-api-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	modelDir = dir
	c := engine.DefaultGenConfig()
	c.Layers, c.Seed = 8, 11
	modelPath = filepath.Join(dir, "tiny.gguf")
	if err := engine.GenerateFile(modelPath, c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	shared.close()
	toolsSwarm.c.close()
	os.RemoveAll(modelDir)
	os.Exit(code)
}

// testLog logs warnings (everything with STRATA_TEST_LOG set) to stderr.
func testLog() *zap.Logger {
	lvl := zapcore.WarnLevel
	if os.Getenv("STRATA_TEST_LOG") != "" {
		lvl = zapcore.DebugLevel
	}
	cfg := zap.NewDevelopmentConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.DisableStacktrace = true
	l, _ := cfg.Build()
	if os.Getenv("STRATA_TEST_LOG") == "" {
		// Raft's transport logs errors on every close; they are noise here.
		return zap.NewNop()
	}
	return l
}

func nodeOptions(extra ...node.Option) []node.Option {
	return append([]node.Option{
		node.WithModelFile(modelPath),
		node.WithHardware(testHW),
		node.WithLogger(testLog()),
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

// cluster is a set of real nodes, each with an API server on loopback.
type cluster struct {
	nodes   []*node.Node
	servers []*Server
	urls    []string
}

// startCluster starts n nodes that join through the first, waits until
// every node can route, and starts an API server on each.
func startCluster(tb testing.TB, n int, extra ...node.Option) *cluster {
	tb.Helper()
	c, err := newCluster(n, extra...)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func newCluster(n int, extra ...node.Option) (*cluster, error) {
	return newClusterEach(n, func(int) []node.Option { return extra })
}

// newClusterEach is newCluster with node i's extra options each(i).
func newClusterEach(n int, each func(i int) []node.Option) (*cluster, error) {
	c := &cluster{}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	for i := range n {
		opts := nodeOptions(each(i)...)
		if i > 0 {
			opts = append(opts, node.WithBootstrap(c.nodes[0].AddrInfo()))
		}
		nd, err := node.New(ctx, opts...)
		if err != nil {
			c.close()
			return nil, err
		}
		for _, p := range c.nodes {
			if err := nd.Connect(ctx, p.AddrInfo()); err != nil {
				c.close()
				nd.Close()
				return nil, err
			}
		}
		c.nodes = append(c.nodes, nd)
	}
	// Ready: every node's committed map places every node, and each can
	// route a full path.
	for {
		ok := true
		for _, nd := range c.nodes {
			m := nd.Committed()
			for _, o := range c.nodes {
				if _, in := m.Range(o.ID().String()); !in {
					ok = false
				}
			}
		}
		if ok {
			break
		}
		select {
		case <-ctx.Done():
			c.close()
			return nil, fmt.Errorf("the swarm did not place every node: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	for _, nd := range c.nodes {
		if err := nd.WaitReady(ctx); err != nil {
			c.close()
			return nil, err
		}
		s, err := New(NodeBackend(nd), WithLogger(testLog()), WithLeaderPoll(20*time.Millisecond))
		if err != nil {
			c.close()
			return nil, err
		}
		addr, err := s.Start("127.0.0.1:0")
		if err != nil {
			c.close()
			return nil, err
		}
		c.servers = append(c.servers, s)
		c.urls = append(c.urls, "http://"+addr.String())
	}
	return c, nil
}

func (c *cluster) close() {
	if c == nil {
		return
	}
	for _, s := range c.servers {
		s.Close()
	}
	for _, n := range c.nodes {
		n.Close()
	}
}

// sharedCluster is the 3-node swarm most tests use; it outlives them
// all, so a test must leave it as it found it.
type sharedCluster struct {
	once sync.Once
	c    *cluster
	err  error
}

var shared sharedCluster

func (s *sharedCluster) get(tb testing.TB) *cluster {
	tb.Helper()
	s.once.Do(func() {
		start := time.Now()
		s.c, s.err = newCluster(3)
		if s.err == nil {
			m := s.c.nodes[0].Committed()
			tb.Logf("shared 3-node swarm ready in %v: epoch %d, %v", time.Since(start).Round(time.Millisecond), m.Epoch, m.Stages)
		}
	})
	if s.err != nil {
		tb.Fatal(s.err)
	}
	return s.c
}

func (s *sharedCluster) close() {
	if s.c != nil {
		s.c.close()
	}
}

// post sends a JSON body and returns the status, headers and body.
func post(tb testing.TB, url, key string, body any) (int, http.Header, []byte) {
	tb.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			tb.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(http.MethodPost, url, rd)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return do(tb, req)
}

func get(tb testing.TB, url, key string) (int, http.Header, []byte) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return do(tb, req)
}

func do(tb testing.TB, req *http.Request) (int, http.Header, []byte) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// errorOf decodes an error response and checks its shape: OpenAI's
// four fields, param and code null or strings.
func errorOf(tb testing.TB, body []byte) errorObject {
	tb.Helper()
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		tb.Fatalf("error body %q is not JSON: %v", body, err)
	}
	obj, ok := raw["error"]
	if !ok {
		tb.Fatalf("error body %q has no error object", body)
	}
	for _, f := range []string{"message", "type", "param", "code"} {
		if _, ok := obj[f]; !ok {
			tb.Fatalf("error body %q lacks %q", body, f)
		}
	}
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		tb.Fatalf("error body %q: %v", body, err)
	}
	return e.Error
}

func str(p *string) string {
	if p == nil {
		return "<null>"
	}
	return *p
}

// event is one SSE event's data.
type event struct {
	data string
}

// sseStream reads a streaming response's events as they come.
type sseStream struct {
	resp   *http.Response
	sc     *bufio.Scanner
	cancel context.CancelFunc
}

func openStream(tb testing.TB, url, key string, body any) *sseStream {
	tb.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		tb.Fatalf("stream: status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		tb.Fatalf("stream content type %q", ct)
	}
	return &sseStream{resp: resp, sc: bufio.NewScanner(resp.Body), cancel: cancel}
}

// next returns the next event's data, or false at the end of the body.
func (s *sseStream) next() (event, bool) {
	var data []string
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if len(data) > 0 {
				return event{data: strings.Join(data, "\n")}, true
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		}
	}
	return event{}, false
}

func (s *sseStream) close() {
	s.resp.Body.Close()
	s.cancel()
}

// streamed is what a whole stream said.
type streamed struct {
	text    string
	finish  string
	usage   *usageJSON
	done    bool         // "data: [DONE]" came
	errObj  *errorObject // an error event came
	chunks  int          // events with text
	role    string       // chat: the first delta's role
	objects map[string]int
	ids     []int32 // token_ids of every chunk, in order
}

// readAll reads a stream to its end and checks each event's shape.
func (s *sseStream) readAll(tb testing.TB, onText func(string)) streamed {
	tb.Helper()
	defer s.close()
	var out streamed
	out.objects = map[string]int{}
	var text strings.Builder
	for {
		ev, ok := s.next()
		if !ok {
			break
		}
		if out.done || out.errObj != nil {
			tb.Fatalf("event %q after the end", ev.data)
		}
		if ev.data == "[DONE]" {
			out.done = true
			continue
		}
		var chunk struct {
			Object  string `json:"object"`
			Choices []struct {
				Text  *string `json:"text"`
				Delta *struct {
					Role    string  `json:"role"`
					Content *string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
				TokenIDs     []int32 `json:"token_ids"`
			} `json:"choices"`
			Usage *usageJSON   `json:"usage"`
			Error *errorObject `json:"error"`
		}
		if err := json.Unmarshal([]byte(ev.data), &chunk); err != nil {
			tb.Fatalf("event %q: %v", ev.data, err)
		}
		if chunk.Error != nil {
			out.errObj = chunk.Error
			continue
		}
		out.objects[chunk.Object]++
		if chunk.Usage != nil {
			out.usage = chunk.Usage
		}
		for _, c := range chunk.Choices {
			out.ids = append(out.ids, c.TokenIDs...)
			var piece string
			if c.Text != nil {
				piece = *c.Text
			}
			if c.Delta != nil {
				if c.Delta.Role != "" {
					out.role = c.Delta.Role
				}
				if c.Delta.Content != nil {
					piece = *c.Delta.Content
				}
			}
			if piece != "" {
				out.chunks++
				text.WriteString(piece)
				if onText != nil {
					onText(piece)
				}
			}
			if c.FinishReason != nil {
				out.finish = *c.FinishReason
			}
		}
	}
	out.text = text.String()
	return out
}
