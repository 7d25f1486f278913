package monitor

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

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

// page is what the monitor page shows, read from its data attributes.
type page struct {
	Status string `json:"status"`
	Crawls int    `json:"crawls"`
	Swarms []struct {
		Name     string `json:"name"`
		Layers   int    `json:"layers"`
		Covered  bool   `json:"covered"`
		Min      int    `json:"min"`
		Max      int    `json:"max"`
		Verified int    `json:"verified"`
		Runs     []Run  `json:"runs"`
		Rows     []struct {
			Node     string `json:"node"`
			Reach    string `json:"reach"`
			Verified bool   `json:"verified"`
			State    string `json:"state"`
		} `json:"rows"`
	} `json:"swarms"`
}

const readPage = `(() => {
  const st = document.getElementById("status");
  return {
    status: st.dataset.state, crawls: +(st.dataset.crawls || 0),
    swarms: [...document.querySelectorAll("section.swarm")].map(s => ({
      name: s.dataset.name, layers: +s.dataset.layers, covered: s.dataset.covered === "true",
      min: +s.dataset.min, max: +s.dataset.max, verified: +s.dataset.verified,
      runs: [...s.querySelectorAll(".cov .run")].map(r => ({start: +r.dataset.start, end: +r.dataset.end, nodes: +r.dataset.nodes})),
      rows: [...s.querySelectorAll("tbody tr")].map(r => ({node: r.dataset.node, reach: r.dataset.reach,
        verified: r.dataset.verified === "true", state: r.dataset.state})),
    })),
  };
})()`

// TestMonitorBrowser opens the monitor's page in headless Chromium over
// a real 4-node swarm (one member behind relays only): it shows the
// swarm covered, the runs and every node with the reachability the
// report gives; then, given a report with a gap and a forged answer, it
// shows the gap and marks the node unverified. No script error is
// thrown. Screenshots go to the test's temp dir (and, with
// STRATA_UPDATE_SCREENSHOT=1, to docs/monitor.png).
func TestMonitorBrowser(t *testing.T) {
	bin := chromiumPath()
	if bin == "" {
		t.Skip("no Chromium found (looked for chromium, chromium-browser, google-chrome; or set STRATA_CHROMIUM): " +
			"run `make chromium` (apt-get install chromium) to run the monitor page's browser test")
	}
	s := startSwarm(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := New(ctx, WithBootstrap(s.nodes[0].AddrInfo()), WithoutDHT(), WithLimits(64, 5*time.Second, 4))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	svc := NewService(m)
	rep, err := svc.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Swarms) != 1 || len(rep.Swarms[0].Nodes) != 4 {
		t.Fatalf("report: %+v", rep.Swarms)
	}
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // root in a container
		chromedp.DisableGPU,
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("no-proxy-server", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	var mu sync.Mutex
	var exceptions []string
	open := true
	logf := func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		if open {
			t.Logf("chromedp: "+f, a...)
		}
	}
	defer func() { mu.Lock(); open = false; mu.Unlock() }()
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithErrorf(logf), chromedp.WithListener(func(ev any) {
		if ev, ok := ev.(*runtime.EventExceptionThrown); ok {
			mu.Lock()
			exceptions = append(exceptions, fmt.Sprintf("%s:%d: %s", ev.ExceptionDetails.URL, ev.ExceptionDetails.LineNumber, ev.ExceptionDetails.Text))
			mu.Unlock()
		}
	}))
	defer bcancel()
	shots := t.TempDir()
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		p := filepath.Join(shots, name+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d KB)", p, len(png)>>10)
		if name == "swarm" && os.Getenv("STRATA_UPDATE_SCREENSHOT") == "1" {
			if err := os.WriteFile(filepath.Join("..", "docs", "monitor.png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// wait reads the page until done says it shows what it should: the
	// page redraws on its own timer.
	wait := func(what string, done func(page) bool) page {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		var p page
		for {
			var err error
			p, err = chromedp.Run(bctx, chromedp.Evaluate[page](readPage))
			if err == nil && done(p) {
				return p
			}
			if time.Now().After(deadline) {
				shot("timeout")
				t.Fatalf("page never showed %s: last %+v, %v", what, p, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	p := wait("the swarm", func(p page) bool { return p.Status == "ok" && len(p.Swarms) == 1 })
	want := rep.Swarms[0]
	got := p.Swarms[0]
	if got.Name != want.Name || got.Layers != 8 || !got.Covered || got.Min != want.Coverage.Min || got.Max != want.Coverage.Max ||
		got.Verified != 4 || !slices.Equal(got.Runs, want.Coverage.Runs) {
		t.Errorf("page shows %+v; report %+v", got, want.Coverage)
	}
	if len(got.Rows) != 4 {
		t.Fatalf("%d node rows", len(got.Rows))
	}
	relayed := 0
	for _, r := range got.Rows {
		i := slices.IndexFunc(want.Nodes, func(n Node) bool { return n.ID == r.Node })
		if i < 0 || want.Nodes[i].Reachability != r.Reach || !r.Verified || r.State != "serving" {
			t.Errorf("row %+v; report %+v", r, want.Nodes)
		}
		if r.Node == s.relayed.ID().String() && r.Reach == ReachRelayed {
			relayed++
		}
	}
	if relayed != 1 {
		t.Errorf("the relayed member is not shown relayed: %+v", got.Rows)
	}
	shot("swarm")

	// A report with a gap and a forged answer (as Aggregate makes it).
	forged := want.Nodes[0]
	forged.Verified, forged.Error = false, "swarm: snapshot signature invalid"
	gap := Swarm{Name: "gappy", Model: "tiny", Layers: 8, Nodes: []Node{forged},
		Coverage: coverage(8, nil)}
	svc.mu.Lock()
	svc.report.Swarms = append(svc.report.Swarms, gap)
	svc.mu.Unlock()
	p = wait("the second swarm", func(p page) bool { return len(p.Swarms) == 2 })
	g := p.Swarms[1]
	if g.Name != "gappy" || g.Covered || g.Min != 0 || len(g.Runs) != 1 || g.Runs[0] != (Run{0, 8, 0}) ||
		len(g.Rows) != 1 || g.Rows[0].Verified || g.Verified != 0 {
		t.Errorf("gap swarm shown as %+v", g)
	}
	shot("gap")
	mu.Lock()
	defer mu.Unlock()
	if len(exceptions) > 0 {
		t.Errorf("page threw: %v", exceptions)
	}
}
