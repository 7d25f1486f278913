package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/stratanet/strata/layers"
)

// TestDashboardRoutes: "/" and /ui/ serve the embedded page without a
// key, anything else unknown is still the JSON 404, and the events
// stream takes the key as a query parameter and sends the swarm view and
// the watcher's first event.
func TestDashboardRoutes(t *testing.T) {
	c := shared.get(t)
	s, err := New(NodeBackend(c.nodes[0]), WithAPIKey("sekrit"), WithLogger(testLog()))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer func() { hs.Close(); s.Close() }()

	for _, tc := range []struct{ path, ctype, has string }{
		{"/", "text/html", `<script src="/ui/app.js">`},
		{"/ui/app.js", "text/javascript", "EventSource"},
		{"/ui/style.css", "text/css", "--serving"},
	} {
		status, hdr, body := get(t, hs.URL+tc.path, "")
		if status != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), tc.ctype) || !strings.Contains(string(body), tc.has) {
			t.Fatalf("GET %s: %d %q, %d bytes", tc.path, status, hdr.Get("Content-Type"), len(body))
		}
		req, _ := http.NewRequest(http.MethodGet, hs.URL+tc.path, nil)
		req.Header.Set("If-None-Match", hdr.Get("ETag"))
		if status, _, _ := do(t, req); status != http.StatusNotModified {
			t.Fatalf("GET %s with its ETag: %d", tc.path, status)
		}
	}
	for _, p := range []string{"/nope", "/ui/", "/ui/nope.js", "/ui/index.html", "/index.html"} {
		key := "sekrit" // with the key, so that the 404 is not a 401
		status, _, body := get(t, hs.URL+p, key)
		if e := errorOf(t, body); status != http.StatusNotFound || str(e.Code) != "not_found" {
			t.Fatalf("GET %s: %d %s", p, status, body)
		}
	}
	if status, _, body := post(t, hs.URL+"/", "", "{}"); status != http.StatusMethodNotAllowed || str(errorOf(t, body).Code) != "method_not_allowed" {
		t.Fatalf("POST /: %d %s", status, body)
	}
	for _, p := range []string{"/v1/swarm/events", "/v1/swarm/events?key=wrong", "/v1/swarm/activity", "/v1/swarm?key=sekrit"} {
		if status, _, body := get(t, hs.URL+p, ""); status != http.StatusUnauthorized {
			t.Fatalf("GET %s without a good key: %d %s", p, status, body)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/v1/swarm/events?key=sekrit", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	st := &sseStream{resp: resp, sc: newScanner(resp.Body), cancel: cancel}
	var sawView, sawWatching bool
	for !sawView || !sawWatching {
		name, data, ok := st.nextNamed()
		if !ok {
			t.Fatalf("events stream ended; view %v watching %v", sawView, sawWatching)
		}
		switch name {
		case "swarm":
			var v swarmJSON
			if err := json.Unmarshal([]byte(data), &v); err != nil {
				t.Fatal(err)
			}
			if len(v.Members) != 3 || !v.Committed.Covers() {
				t.Fatalf("swarm event: %d members, map %v", len(v.Members), v.Committed)
			}
			sawView = true
		case "event":
			var e dashEventJSON
			if err := json.Unmarshal([]byte(data), &e); err != nil {
				t.Fatal(err)
			}
			sawWatching = sawWatching || e.Kind == "watching"
		}
	}
	// Close ends the stream: a page left open must not hold the server.
	done := make(chan struct{})
	go func() {
		for {
			if _, _, ok := st.nextNamed(); !ok {
				close(done)
				return
			}
		}
	}()
	s.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the events stream outlived Close")
	}
}

// TestDashboardDiff: the watcher's diff names joins, leaves, liveness,
// epochs, warmups and leader changes.
func TestDashboardDiff(t *testing.T) {
	l1, l2 := "peerA", "peerB"
	a := &swarmJSON{Epoch: 3, Leader: &l1, Members: []memberJSON{
		{ID: "peerA", Member: true, Liveness: "self", State: "serving"},
		{ID: "peerB", Member: true, Liveness: "alive", State: "serving"},
		{ID: "peerC", Member: true, Liveness: "alive", State: "serving"},
	}}
	b := &swarmJSON{Epoch: 4, Leader: &l2, Pending: &pendingJSON{Map: layers.LayerMap{Epoch: 5}, Reason: "repair"},
		Members: []memberJSON{
			{ID: "peerA", Member: true, Liveness: "self", State: "serving"},
			{ID: "peerB", Member: true, Liveness: "suspect", State: "draining"},
			{ID: "peerD", Member: true, Liveness: "alive", State: "joining"},
		}}
	var kinds []string
	for _, e := range diffViews(a, b) {
		kinds = append(kinds, e.Kind+":"+e.Node)
	}
	want := []string{"joined:peerD", "left:peerC", "liveness:peerB", "state:peerB", "epoch:", "pending:", "leader:peerB"}
	slices.Sort(kinds)
	slices.Sort(want)
	if !slices.Equal(kinds, want) {
		t.Fatalf("diff: %v, want %v", kinds, want)
	}
	if got := diffViews(b, b); len(got) != 0 {
		t.Fatalf("no change gave %v", got)
	}
}

func TestDashboardParsePath(t *testing.T) {
	got := parsePath("12D3KooWA[0,4) → 12D3KooWB[4,8)")
	want := []hopJSON{{"12D3KooWA", 0, 4}, {"12D3KooWB", 4, 8}}
	if !slices.Equal(got, want) {
		t.Fatalf("parsePath: %v", got)
	}
}

// chromiumPath finds a Chromium the test can drive, or "".
func chromiumPath() string {
	if p := os.Getenv("STRATA_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// coverage is what the page's coverage view shows, read from the data
// attributes it puts on the SVG and its bars.
type coverage struct {
	Epoch  int `json:"epoch"`
	Layers int `json:"layers"`
	Gaps   int `json:"gaps"`
	Bars   []struct {
		Node     string `json:"node"`
		Start    int    `json:"start"`
		End      int    `json:"end"`
		Liveness string `json:"liveness"`
	} `json:"bars"`
	Rows []struct {
		Node     string `json:"node"`
		Liveness string `json:"liveness"`
	} `json:"rows"`
	Events []string `json:"events"`
}

const readCoverage = `(() => {
  const s = document.getElementById("coverage");
  return {
    epoch: +(s.dataset.epoch || 0), layers: +(s.dataset.layers || 0), gaps: +(s.dataset.gaps || 0),
    bars: [...s.querySelectorAll('rect.bar[data-kind="committed"]')].map(b => ({node: b.dataset.node, start: +b.dataset.start, end: +b.dataset.end, liveness: b.dataset.liveness})),
    rows: [...document.querySelectorAll("#nodes tbody tr")].map(r => ({node: r.dataset.node, liveness: r.dataset.liveness})),
    events: [...document.querySelectorAll("#events li")].map(li => li.dataset.kind + ":" + (li.dataset.node || "")),
  };
})()`

// TestDashboardBrowser opens the dashboard of a 3-node swarm in headless
// Chromium: the coverage view shows the three nodes covering every
// layer, a chat message sent from the page streams back, its path is
// drawn, a killed node leaves and the map changes, and a 100-node view
// renders in time. Screenshots go to the test's temp dir (and, with
// STRATA_UPDATE_SCREENSHOT=1, to docs/dashboard.png).
func TestDashboardBrowser(t *testing.T) {
	bin := chromiumPath()
	if bin == "" {
		t.Skip("no Chromium found (looked for chromium, chromium-browser, google-chrome; or set STRATA_CHROMIUM): " +
			"run `make chromium` (apt-get install chromium) to run the dashboard's browser test")
	}
	start := time.Now()
	c := startCluster(t, 3)
	defer c.close()
	t.Logf("3-node swarm ready in %v", time.Since(start).Round(time.Millisecond))
	// The page talks to the node through a proxy that holds a streamed
	// chat answer after its first text until the test has seen the page
	// draw it: that the answer is drawn while it streams is then a fact
	// the test arranges, not a race with the browser it hopes to win.
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseAll()
	target, err := url.Parse(c.urls[0])
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	proxy.ModifyResponse = func(r *http.Response) error {
		if r.Request.URL.Path == "/v1/chat/completions" && r.Header.Get("Content-Type") == "text/event-stream" {
			r.Body = &holdAfterFirstText{ReadCloser: r.Body, release: release}
		}
		return nil
	}
	ps := httptest.NewServer(proxy)
	defer ps.Close()
	base := ps.URL
	shots := t.TempDir()
	if d := os.Getenv("STRATA_SCREENSHOT_DIR"); d != "" {
		shots = d // kept after the test, e.g. as CI artifacts
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // root in a container
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("no-proxy-server", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 1000),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	// chromedp's goroutines may log after the test ends; t.Logf must not
	// be called then.
	var logMu sync.Mutex
	logOpen := true
	logf := func(f string, a ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		if logOpen {
			t.Logf("chromedp: "+f, a...)
		}
	}
	defer func() { logMu.Lock(); logOpen = false; logMu.Unlock() }()
	var pageMu sync.Mutex
	var exceptions, requests []string
	listen := func(ev any) {
		pageMu.Lock()
		defer pageMu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			exceptions = append(exceptions, fmt.Sprintf("%s:%d: %s", d.URL, d.LineNumber, msg))
		case *network.EventRequestWillBeSent:
			requests = append(requests, ev.Request.URL)
		}
	}
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(logf), chromedp.WithListener(listen))
	defer cancel()
	// The browser lives as long as the context of the first Run: this
	// bounds the whole test's use of it.
	ctx, tcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer tcancel()

	shot := func(name string) []byte {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		p := filepath.Join(shots, name+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d KB)", p, len(png)>>10)
		return png
	}
	// waitFor runs check until it says done.
	waitFor := func(what string, limit time.Duration, check func() (bool, error)) {
		t.Helper()
		deadline := time.After(limit)
		tick := time.NewTicker(100 * time.Millisecond) // the page refreshes on its own timers
		defer tick.Stop()
		for {
			done, err := check()
			if err == nil && done {
				return
			}
			select {
			case <-tick.C:
			case <-deadline:
				shot("timeout")
				t.Fatalf("waiting %v for %s: last error %v", limit, what, err)
			}
		}
	}
	var cov coverage
	read := func() (err error) {
		cov, err = chromedp.Run(ctx, chromedp.Evaluate[coverage](readCoverage))
		return err
	}

	opened := time.Now()
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatalf("open %s in %s: %v", base, bin, err)
	}

	// 1. Three nodes covering every layer, as the committed map says.
	want := c.nodes[0].Committed()
	waitFor("the coverage view of 3 nodes", 30*time.Second, func() (bool, error) {
		return len(cov.Bars) == 3 && cov.Layers > 0, read()
	})
	t.Logf("page shows %d bars at epoch %d after %v", len(cov.Bars), cov.Epoch, time.Since(opened).Round(time.Millisecond))
	if cov.Layers != c.nodes[0].Model().Layers || cov.Gaps != 0 {
		t.Fatalf("coverage: %d layers (model %d), %d gaps", cov.Layers, c.nodes[0].Model().Layers, cov.Gaps)
	}
	covered := make([]int, cov.Layers)
	for _, b := range cov.Bars {
		r, ok := want.Range(b.Node)
		if uint64(cov.Epoch) == want.Epoch && (!ok || r.Start != b.Start || r.End != b.End) {
			t.Fatalf("bar %s [%d,%d); the committed map says %v (%v)", b.Node, b.Start, b.End, r, ok)
		}
		for l := b.Start; l < b.End; l++ {
			covered[l]++
		}
	}
	for l, n := range covered {
		if n == 0 {
			t.Fatalf("layer %d has no bar: %+v", l, cov.Bars)
		}
	}
	ids := map[string]bool{}
	for _, nd := range c.nodes {
		ids[nd.ID().String()] = true
	}
	for _, b := range cov.Bars {
		if !ids[b.Node] {
			t.Fatalf("bar of unknown node %s", b.Node)
		}
		delete(ids, b.Node)
	}
	if len(ids) != 0 {
		t.Fatalf("nodes without a bar: %v", ids)
	}
	epoch0 := cov.Epoch
	shot("1-coverage")

	// 2. A chat message from the page, streamed back through the node.
	// An observer notes the answer's length each time the page changes
	// it: more than one length means text showed before the stream ended.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { window.__answerLengths = new Set();
	  new MutationObserver(() => { const m = [...document.querySelectorAll(".msg.assistant")].pop();
	    if (m && m.firstChild && m.firstChild.textContent) window.__answerLengths.add(m.firstChild.textContent.length); })
	    .observe(document.getElementById("chat-log"), {childList: true, subtree: true, characterData: true}); return true; })()`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.ID("chat-max"), "40"),
		chromedp.SendKeys(chromedp.ID("chat-input"), "Hello, swarm!"),
		chromedp.Click(chromedp.ID("chat-send")),
	); err != nil {
		t.Fatal(err)
	}
	type chatState struct {
		Done, Error, Text string
		Deltas            int
	}
	var chat chatState
	const readChat = `(() => { const m = [...document.querySelectorAll(".msg.assistant")].pop();
	  return m ? {Done: m.dataset.done, Error: m.dataset.error || "", Text: m.firstChild.textContent, Deltas: +m.dataset.deltas} : {Done: ""}; })()`
	// The proxy holds the stream after its first event: the page must
	// show that much before the rest comes.
	waitFor("the first delta drawn while the stream is held", 60*time.Second, func() (bool, error) {
		var err error
		chat, err = chromedp.Run(ctx, chromedp.Evaluate[chatState](readChat))
		return chat.Done == "false" && chat.Text != "", err
	})
	releaseAll()
	waitFor("the streamed answer", 60*time.Second, func() (bool, error) {
		var err error
		chat, err = chromedp.Run(ctx, chromedp.Evaluate[chatState](readChat))
		return chat.Done == "true", err
	})
	if chat.Error != "" || chat.Text == "" || chat.Deltas < 2 {
		t.Fatalf("chat: error %q, %d deltas, text %q", chat.Error, chat.Deltas, chat.Text)
	}
	shown, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.__answerLengths.size`))
	if err != nil {
		t.Fatal(err)
	}
	if shown < 2 {
		t.Fatalf("the answer was drawn in %d step(s) for %d deltas: not streamed onto the page", shown, chat.Deltas)
	}
	t.Logf("chat answer: %d deltas, drawn in %d steps (the first while the rest was held): %q", chat.Deltas, shown, chat.Text)

	// Its request, with a path over the coverage view.
	type reqState struct {
		Status string
		Hops   int
	}
	var req reqState
	waitFor("the request and its path", 20*time.Second, func() (bool, error) {
		var err error
		req, err = chromedp.Run(ctx, chromedp.Evaluate[reqState](
			`(() => { const r = document.querySelector("#requests tbody tr"); const p = document.querySelector("#coverage polyline.req-path");
			  return {Status: r ? r.dataset.status : "", Hops: p ? +p.dataset.hops : 0}; })()`))
		return req.Status != "" && req.Hops > 0, err
	})
	if req.Status != "ok" || req.Hops < 2 {
		t.Fatalf("request row status %q, path of %d hops (every path has two hops here)", req.Status, req.Hops)
	}
	shot("2-chat")

	// 3. A node dies: the page shows it leave and the map change. The
	// victim is neither the page's node nor, if it can help, the leader.
	victim := 1
	if c.nodes[0].Swarm().Leader == c.nodes[1].ID() {
		victim = 2
	}
	vid := c.nodes[victim].ID().String()
	killed := time.Now()
	c.nodes[victim].Kill()
	c.servers[victim].Close()
	t.Logf("killed node %d (%s)", victim, vid)
	sawDead := false
	waitFor("the victim to leave and a new epoch", 60*time.Second, func() (bool, error) {
		if err := read(); err != nil {
			return false, err
		}
		for _, r := range cov.Rows {
			if r.Node == vid && (r.Liveness == "dead" || r.Liveness == "suspect") && !sawDead {
				sawDead = true
				t.Logf("page shows %s %s after %v", short(vid), r.Liveness, time.Since(killed).Round(time.Millisecond))
			}
		}
		for _, b := range cov.Bars {
			if b.Node == vid {
				return false, nil
			}
		}
		return cov.Epoch > epoch0 && len(cov.Bars) == 2 && cov.Gaps == 0, nil
	})
	t.Logf("page shows epoch %d with %d bars and no gap %v after the kill; events: %v",
		cov.Epoch, len(cov.Bars), time.Since(killed).Round(time.Millisecond), cov.Events)
	if !slices.ContainsFunc(cov.Events, func(e string) bool { return strings.HasPrefix(e, "epoch:") }) ||
		!slices.ContainsFunc(cov.Events, func(e string) bool { return e == "left:"+vid || e == "liveness:"+vid }) {
		t.Fatalf("events on the page lack the epoch or the victim's leave: %v", cov.Events)
	}
	final := shot("3-after-kill")
	if os.Getenv("STRATA_UPDATE_SCREENSHOT") != "" {
		p := filepath.Join("..", "..", "docs", "dashboard.png")
		if err := os.WriteFile(p, final, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", p)
	}

	// 4. A hundred nodes: the live stream stops and the page renders a
	// generated view of 100 members at once, for real, in Chromium.
	type bigState struct {
		Ms   float64
		Bars int
		Rows int
	}
	big, err := chromedp.Run(ctx, chromedp.Evaluate[bigState](fmt.Sprintf(`(async () => {
	  const base = await (await fetch("/v1/swarm")).json();
	  window.strataDashboard.stop();
	  const L = base.model.layers, members = [];
	  for (let i = 0; i < 100; i++) {
	    const start = (i * 3) %% L, end = Math.min(L, start + 1 + (i %% 4));
	    const id = "12D3KooWSimulatedPeer" + String(i).padStart(3, "0");
	    members.push({id, self: i === 0, member: true, voter: i < 5, multiaddrs: [], state: i %% 17 ? "serving" : "warming",
	      draining: false, liveness: i === 0 ? "self" : (i %% 23 ? "alive" : "dead"), connected: true, relayed: i %% 11 === 0,
	      rtt_ms: 1 + i / 10, simulated: true, capabilities: {Hardware: {name: "rtx4090", memory_bytes: 24 * 2 ** 30, tflops: 165}},
	      committed_range: {start, end}, pending_range: i %% 13 ? null : {start: 0, end: 2},
	      load: {epoch: 9, range: {start, end}, queue_depth: i %% 5, active_sessions: i %% 3, free_kv_tokens: 10000 + i, layer_latency_ms: 0.5 + i %% 7 / 10, age_ms: 120}});
	  }
	  const v = Object.assign({}, base, {members, leader: members[0].id, voters: members.slice(0, 5).map(m => m.id), epoch: 9, pending: null,
	    model: Object.assign({}, base.model, {simulated: true})});
	  const ms = window.strataDashboard.render(v);
	  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
	  return {Ms: ms, Bars: document.querySelectorAll('#coverage rect.bar[data-kind="committed"]').length,
	    Rows: document.querySelectorAll("#nodes tbody tr").length};
	})()`), chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("100-node view rendered in %.1f ms: %d bars, %d table rows", big.Ms, big.Bars, big.Rows)
	if big.Bars != 100 || big.Rows != 100 || big.Ms > 1000 {
		t.Fatalf("100 nodes: %d bars, %d rows in %.1f ms", big.Bars, big.Rows, big.Ms)
	}
	shot("4-hundred-nodes")

	pageMu.Lock()
	defer pageMu.Unlock()
	if len(exceptions) > 0 {
		t.Fatalf("the page threw: %v", exceptions)
	}
	if !slices.ContainsFunc(requests, func(u string) bool { return strings.HasSuffix(u, "/ui/app.js") }) {
		t.Fatalf("no request for app.js seen: %v", requests)
	}
	for _, u := range requests {
		if !strings.HasPrefix(u, base+"/") {
			t.Fatalf("the page reached beyond its node: %s", u)
		}
	}
	t.Logf("%d requests from the page, all to %s; test took %v", len(requests), base, time.Since(start).Round(time.Millisecond))
}

func newScanner(r io.Reader) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 8<<20) // a 100-member view is large
	return sc
}

// nextNamed returns the next event's name ("" for none) and data.
func (s *sseStream) nextNamed() (name, data string, ok bool) {
	var lines []string
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if len(lines) > 0 {
				return name, strings.Join(lines, "\n"), true
			}
			name = ""
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			lines = append(lines, strings.TrimPrefix(line, "data: "))
		}
	}
	return "", "", false
}

// TestDashboardRequestScores: the dashboard's request log names the
// profile that routed each request and its path's winning score.
func TestDashboardRequestScores(t *testing.T) {
	c := shared.get(t)
	u := c.urls[0]
	completion(t, u+"/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 4})
	status, _, body := get(t, u+"/v1/swarm/activity", "")
	if status != http.StatusOK {
		t.Fatalf("activity: %d %s", status, body)
	}
	var a activityJSON
	if err := json.Unmarshal(body, &a); err != nil || len(a.Requests) == 0 {
		t.Fatalf("activity %s: %v", body, err)
	}
	q := a.Requests[len(a.Requests)-1]
	want := c.nodes[0].Swarm().Scheduler.Default
	if q.Profile != want || len(q.Scores) != len(q.Paths) || len(q.Scores) == 0 {
		t.Fatalf("request: profile %q (want %q), %d scores for %d paths", q.Profile, want, len(q.Scores), len(q.Paths))
	}
	s := q.Scores[0]
	if !(s.Cost > 0) || math.Abs(s.Latency+s.Load+s.Locality+s.Other-s.Cost) > 1e-9*s.Cost+1e-12 {
		t.Fatalf("score %+v: not a positive cost split into its terms", s)
	}
	// The unit scores are in [0, 1]; the winning path's latency score is
	// the fastest eligible node's share of its hops' time, so above 0.
	us := s.Unit
	for _, x := range []float64{us.Latency, us.Load, us.Locality, us.Stale, us.KVHeadroom, us.PrefixAffinity} {
		if !(x >= 0 && x <= 1) {
			t.Fatalf("unit scores %+v outside [0, 1]", us)
		}
	}
	if !(us.Latency > 0) {
		t.Fatalf("unit scores %+v: latency 0 on a path that ran", us)
	}
	if !strings.Contains(string(body), `"unit":{"latency":`) {
		t.Fatalf("activity lacks the unit scores: %s", body)
	}
}

// holdAfterFirstText passes a server-sent event stream through up to the
// end of its first event with text (a chat stream's first chunk carries
// only the role), then waits for release before the rest.
type holdAfterFirstText struct {
	io.ReadCloser
	release <-chan struct{}
	seen    []byte // what was passed, until that event's end
	held    bool
}

func (h *holdAfterFirstText) Read(p []byte) (int, error) {
	if h.held {
		<-h.release
		return h.ReadCloser.Read(p)
	}
	n, err := h.ReadCloser.Read(p)
	before := len(h.seen)
	h.seen = append(h.seen, p[:n]...)
	for start := 0; ; {
		i := bytes.Index(h.seen[start:], []byte("\n\n"))
		if i < 0 {
			return n, err
		}
		end := start + i + 2
		if ev := h.seen[start:end]; bytes.Contains(ev, []byte(`"content":"`)) && !bytes.Contains(ev, []byte(`"content":""`)) {
			// Pass up to this event's end; the rest waits.
			keep := max(end-before, 0)
			rest := append([]byte(nil), p[keep:n]...)
			h.held = true
			h.ReadCloser = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(rest), h.ReadCloser), h.ReadCloser}
			return keep, nil
		}
		start = end
	}
}
