package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/node"
	"github.com/stratanet/strata/routing"
	"github.com/stratanet/strata/swarm"
)

// fakeBackend is a Backend of plain data, for the handlers' unit tests:
// no node, no swarm, no consensus. Real-cluster tests (cluster_test.go
// and the others) cover the integration.
type fakeBackend struct {
	mu        sync.Mutex
	id        peer.ID
	committed layers.LayerMap
	snap      node.SwarmSnapshot
	genErr    error
	lastReq   node.Request
	verify    node.VerifyStats
}

func (f *fakeBackend) Generate(_ context.Context, req node.Request, _ Stream) (Stream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastReq = req
	return nil, f.genErr
}

// The fake cannot change the swarm's configuration (verify_test.go's
// backends can).
func (f *fakeBackend) SetSwarmVerifyRate(context.Context, float64) error { return ErrUnsupported }
func (f *fakeBackend) SetSwarmSessionTokens(context.Context, int) error  { return ErrUnsupported }
func (f *fakeBackend) SetSwarmStewards(context.Context, []string) error  { return ErrUnsupported }
func (f *fakeBackend) ID() peer.ID                                       { return f.id }
func (f *fakeBackend) CountTokens(req node.Request) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastReq = req
	return len(req.Messages), f.genErr
}
func (f *fakeBackend) Model() node.ModelInfo {
	return node.ModelInfo{Name: "fake-model", Fingerprint: "sha256:fake", Layers: 8, Hidden: 64, Vocab: 512, Context: 1024}
}
func (f *fakeBackend) Committed() layers.LayerMap {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.committed
}
func (f *fakeBackend) Swarm() node.SwarmSnapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.snap
	s.Held = layers.Range{Start: 0, End: 4}
	return s
}
func (f *fakeBackend) Metrics() node.Metrics {
	f.mu.Lock()
	defer f.mu.Unlock()
	return node.Metrics{Requests: 7, FreeKV: -1, Verify: f.verify}
}

// fakeProfiles builds cfg's profiles for a built-in model.
func fakeProfiles(cfg routing.SchedulerConfig) (*routing.Profiles, error) {
	m, err := layers.Model("llama-3-8b")
	if err != nil {
		return nil, err
	}
	return routing.NewProfiles(cfg, routing.WithModel(m))
}

func fakePeer(t *testing.T) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// newFakeSwarm: self and b serve the committed map; c is a member that
// is dead in the peer table and loads [0, 4) for the pending map; d is
// a peer seen only in the peer table.
func newFakeSwarm(t *testing.T) (*fakeBackend, [4]peer.ID) {
	var ids [4]peer.ID
	for i := range ids {
		ids[i] = fakePeer(t)
	}
	self, b, c, d := ids[0], ids[1], ids[2], ids[3]
	committed, err := layers.NewLayerMap(8, 3, layers.Stage{Node: self.String(), Range: layers.Range{Start: 0, End: 4}},
		layers.Stage{Node: b.String(), Range: layers.Range{Start: 4, End: 8}})
	if err != nil {
		t.Fatal(err)
	}
	pendingMap, err := layers.NewLayerMap(8, 4, layers.Stage{Node: self.String(), Range: layers.Range{Start: 0, End: 4}},
		layers.Stage{Node: b.String(), Range: layers.Range{Start: 4, End: 8}}, layers.Stage{Node: c.String(), Range: layers.Range{Start: 0, End: 4}})
	if err != nil {
		t.Fatal(err)
	}
	// A pending map folds from the log, as every replica's does.
	hw, _ := layers.Device("l40s")
	caps := consensus.Capabilities{Hardware: hw, Region: "eu"}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var recs []consensus.Record
	for _, id := range []peer.ID{self, b, c} {
		recs = append(recs, consensus.Record{At: t0, Event: consensus.NodeJoined{Node: id.String(), Caps: caps, Fingerprint: "sha256:fake"}})
	}
	first := committed
	first.Epoch = 1
	recs = append(recs, consensus.Record{At: t0, Event: consensus.MapProposed{Map: first, Deadline: t0.Add(time.Minute), Reason: "first map"}},
		consensus.Record{At: t0, Event: consensus.StageReady{Node: self.String(), Epoch: 1, Range: layers.Range{Start: 0, End: 4}}},
		consensus.Record{At: t0, Event: consensus.StageReady{Node: b.String(), Epoch: 1, Range: layers.Range{Start: 4, End: 8}}},
		consensus.Record{At: t0, Event: consensus.MapCommitted{Epoch: 1}})
	pm := pendingMap
	pm.Epoch = 2
	recs = append(recs, consensus.Record{At: t0, Event: consensus.MapProposed{Map: pm, Deadline: t0.Add(time.Minute), Reason: "join of c"}})
	st := consensus.Fold(recs...)
	p, ok := st.Pending()
	if !ok {
		t.Fatal("no pending map folded")
	}
	f := &fakeBackend{id: self, committed: st.Committed(), snap: node.SwarmSnapshot{
		Leader: self, IsLeader: true, Voters: []peer.ID{self, b}, Members: st.Members(), Pending: p, HasPending: true,
		Self: swarm.Status{RangeStart: 0, RangeEnd: 4, Epoch: 1, State: swarm.StateServing, FreeKV: 100},
		Peers: []swarm.Peer{
			{ID: b, Liveness: swarm.Alive, Connected: true},
			{ID: c, Liveness: swarm.Dead},
			{ID: d, Liveness: swarm.Alive, Connected: true},
		},
	}}
	return f, ids
}

func fakeServer(t *testing.T, b Backend) *httptest.Server {
	t.Helper()
	s, err := New(b, WithLogger(testLog()))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() { hs.Close(); s.Close() })
	return hs
}

func TestSwarmViewFromBackendData(t *testing.T) {
	f, ids := newFakeSwarm(t)
	hs := fakeServer(t, f)
	status, _, body := get(t, hs.URL+"/v1/swarm", "")
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	var v swarmJSON
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	if v.StaticMap || v.Leader == nil || *v.Leader != ids[0].String() || len(v.Voters) != 2 || v.Pending == nil {
		t.Fatalf("view: static %v leader %v voters %v pending %v", v.StaticMap, v.Leader, v.Voters, v.Pending)
	}
	byID := map[string]memberJSON{}
	for _, m := range v.Members {
		byID[m.ID] = m
	}
	if len(byID) != 4 {
		t.Fatalf("%d members in the view, want 4 (three members and a peer)", len(byID))
	}
	self, b, c, d := byID[ids[0].String()], byID[ids[1].String()], byID[ids[2].String()], byID[ids[3].String()]
	if !self.Self || self.Liveness != "self" || self.State != "serving" || self.Load == nil || self.Load.FreeKV != 100 {
		t.Errorf("self: %+v", self)
	}
	if !b.Member || !b.Voter || b.Liveness != "alive" || b.Committed == nil || *b.Committed != (layers.Range{Start: 4, End: 8}) {
		t.Errorf("b: %+v", b)
	}
	if !c.Member || c.Voter || c.Liveness != "dead" || c.Committed != nil || c.Pending == nil || *c.Pending != (layers.Range{Start: 0, End: 4}) {
		t.Errorf("c: %+v", c)
	}
	if d.Member || d.Liveness != "alive" || d.Capabilities != nil {
		t.Errorf("d: %+v", d)
	}
	if len(v.Pending.Waiting) != 1 || v.Pending.Waiting[0] != ids[2].String() {
		t.Errorf("pending waits for %v, want c", v.Pending.Waiting)
	}
}

func TestHealthAndMetricsFromBackendData(t *testing.T) {
	f, _ := newFakeSwarm(t)
	hs := fakeServer(t, f)
	status, _, body := get(t, hs.URL+"/healthz?ready=1", "")
	var h healthJSON
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatal(err)
	}
	if status != http.StatusOK || h.Peers != 2 || h.Epoch != 1 || !h.MapCovers || !h.Routable {
		t.Fatalf("health %d: %+v", status, h)
	}
	resp, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"strata_node_generations_total 7",
		"strata_pending_epoch 2",
		"strata_members 3",
		"strata_is_leader 1",
		`strata_peers{liveness="dead"} 1`,
		`strata_peers{liveness="alive"} 2`,
		"strata_entry_queue_length 0",
		"strata_entry_queue_wait_seconds_count 0",
	} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestNotReadyUntilRoutable: a map that covers every layer is not
// enough: until the node's own view routes a full path, ?ready=1 says
// 503 with the reason, while the plain health check stays 200.
func TestNotReadyUntilRoutable(t *testing.T) {
	f, _ := newFakeSwarm(t)
	f.mu.Lock()
	f.snap.RouteErr = fmt.Errorf("%w: routing: no path: layer 4 has no live holder", node.ErrNoCapacity)
	f.mu.Unlock()
	hs := fakeServer(t, f)
	status, hdr, body := get(t, hs.URL+"/healthz?ready=1", "")
	var h healthJSON
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatal(err)
	}
	if status != http.StatusServiceUnavailable || h.Status != "not_ready" || !h.MapCovers || h.Routable ||
		!strings.Contains(h.NotReady, "no live holder") || hdr.Get("Retry-After") == "" {
		t.Fatalf("ready %d %v: %s", status, hdr, body)
	}
	if status, _, body := get(t, hs.URL+"/healthz", ""); status != http.StatusOK {
		t.Fatalf("health %d: %s", status, body)
	}
	f.mu.Lock()
	f.snap.RouteErr = nil
	f.mu.Unlock()
	if status, _, body := get(t, hs.URL+"/healthz?ready=1", ""); status != http.StatusOK {
		t.Fatalf("ready once routable: %d %s", status, body)
	}
}

// TestQueueTimeoutField: queue_timeout (body, seconds) or the
// X-Strata-Queue-Timeout header reaches the node as Request.QueueTimeout,
// 0 as "do not wait" (negative); the body wins; bad values are 400s
// naming the parameter.
func TestQueueTimeoutField(t *testing.T) {
	f, _ := newFakeSwarm(t)
	f.genErr = fmt.Errorf("%w: test", node.ErrNoCapacity)
	hs := fakeServer(t, f)
	for _, tc := range []struct {
		body, header string
		status       int
		want         time.Duration
	}{
		{`{"prompt":"hi","max_tokens":4}`, "", http.StatusServiceUnavailable, 0},
		{`{"prompt":"hi","max_tokens":4,"queue_timeout":2.5}`, "", http.StatusServiceUnavailable, 2500 * time.Millisecond},
		{`{"prompt":"hi","max_tokens":4,"queue_timeout":0}`, "", http.StatusServiceUnavailable, -1},
		{`{"prompt":"hi","max_tokens":4}`, "1", http.StatusServiceUnavailable, time.Second},
		{`{"prompt":"hi","max_tokens":4,"queue_timeout":3}`, "1", http.StatusServiceUnavailable, 3 * time.Second},
		{`{"prompt":"hi","max_tokens":4,"queue_timeout":-1}`, "", http.StatusBadRequest, 0},
		{`{"prompt":"hi","max_tokens":4,"queue_timeout":1e9}`, "", http.StatusBadRequest, 0},
		{`{"prompt":"hi","max_tokens":4}`, "soon", http.StatusBadRequest, 0},
	} {
		f.mu.Lock()
		f.lastReq = node.Request{QueueTimeout: 42}
		f.mu.Unlock()
		req, err := http.NewRequest(http.MethodPost, hs.URL+"/v1/completions", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if tc.header != "" {
			req.Header.Set(QueueTimeoutHeader, tc.header)
		}
		status, _, raw := do(t, req)
		if status != tc.status {
			t.Fatalf("%s (header %q): %d %s", tc.body, tc.header, status, raw)
		}
		f.mu.Lock()
		got := f.lastReq.QueueTimeout
		f.mu.Unlock()
		if tc.status == http.StatusBadRequest {
			if e := errorOf(t, raw); str(e.Param) != "queue_timeout" || got != 42 {
				t.Fatalf("%s (header %q): %s, node asked %v", tc.body, tc.header, raw, got)
			}
			continue
		}
		if got != tc.want {
			t.Fatalf("%s (header %q): queue timeout %v, want %v", tc.body, tc.header, got, tc.want)
		}
	}
}

// TestNoCapacityFromBackend: a backend that refuses for want of capacity
// gives 503 with Retry-After, whatever the backend is.
func TestNoCapacityFromBackend(t *testing.T) {
	f, _ := newFakeSwarm(t)
	f.genErr = fmt.Errorf("%w: no path", node.ErrNoCapacity)
	hs := fakeServer(t, f)
	resp, err := http.Post(hs.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hi","max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
}
