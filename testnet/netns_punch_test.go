//go:build linux

package testnet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestNetnsHolePunch runs five `strata node` processes: n1 public (the
// relay), n2 and n3 behind endpoint-independent NATs, n4 and n5 behind
// symmetric NATs. n2 and n3 must end up linked directly by DCUtR hole
// punching; n4 and n5 can only be linked through the relay, and the
// swarm must still serve a request entered at either. Nodes listen on
// TCP and QUIC: hole punching through NATs is far more reliable over
// UDP than with TCP simultaneous open. It builds the binary, so it runs
// only with STRATA_NETNS_NODES=1.
func TestNetnsHolePunch(t *testing.T) {
	needNetAdmin(t)
	if os.Getenv("STRATA_NETNS_NODES") == "" {
		t.Skip("set STRATA_NETNS_NODES=1 to run five strata nodes behind NATs in namespaces (builds the binary; about a minute)")
	}
	dir := t.TempDir()
	bin := dir + "/strata"
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/strata").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	spec := NetworkSpec{Mode: ModeNamespaces, Regions: []RegionSpec{{Name: "eu", RTT: 20 * time.Millisecond, Rate: "1gbit"}}}
	nw, err := newNamespaces(spec, WithNamespaceLog(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nw.Close(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kinds := []NATKind{NATNone, NATEIM, NATEIM, NATSymmetric, NATSymmetric}
	var places []Placement
	for i, k := range kinds {
		places = append(places, Placement{Name: fmt.Sprintf("n%d", i+1), Region: "eu", NAT: k})
	}
	if err := nw.Setup(ctx, places); err != nil {
		t.Fatal(err)
	}
	nodes := &nsNodes{t: t, nw: nw, dir: dir, bin: bin}
	t.Cleanup(nodes.stop)

	t0 := time.Now()
	boot := nodes.start(ctx, 0, "")
	t.Logf("founder n1: %s", boot)
	for i := 1; i < len(kinds); i++ {
		nodes.start(ctx, i, boot)
	}
	ids := make([]string, len(kinds))
	for i := range ids {
		for ids[i] == "" && ctx.Err() == nil {
			var v nsSwarmView
			if nsGetJSON(ctx, nw.APIURL(i, 5001)+"/v1/swarm", &v) == nil {
				ids[i] = v.Node
			} else {
				time.Sleep(200 * time.Millisecond)
			}
		}
	}
	link := func(from, to int) (string, nsSwarmView) {
		var v nsSwarmView
		if err := nsGetJSON(ctx, nw.APIURL(from, 5001)+"/v1/swarm", &v); err != nil {
			return "", v
		}
		for _, m := range v.Members {
			if m.ID == ids[to] {
				return m.Link, v
			}
		}
		return "", v
	}

	// EIM: n2 and n3 get a direct link by hole punching. Each side
	// says so once its DCUtR tracer reported the punch (a direct link
	// shows as "direct" until then, for up to a heartbeat).
	var fwd, rev string
	var punched time.Duration
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		fwd, _ = link(1, 2)
		rev, _ = link(2, 1)
		if fwd == "hole-punched" && rev == "hole-punched" {
			punched = time.Since(t0)
			break
		}
	}
	_, v2 := link(1, 2)
	t.Logf("n2 (eim NAT): reachability %s, relays %d, %s", v2.NAT.Reachability, len(v2.NAT.Relays), v2.NAT.Advice)
	if punched == 0 {
		t.Errorf("n2 and n3 (both behind eim NATs): links %q and %q, want hole-punched on both sides", fwd, rev)
	} else {
		t.Logf("n2 and n3 (eim NATs) linked directly by hole punching, both sides reporting it %v after the nodes started", punched.Round(time.Millisecond))
	}
	for _, i := range []int{1, 2} {
		if pu := nodes.punchLines(i); len(pu) > 0 {
			t.Logf("n%d: %s", i+1, strings.Join(pu, "\n    "))
		}
	}

	// Symmetric: n4 and n5 try, fail, and stay relayed.
	var failed bool
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline) && !failed; time.Sleep(250 * time.Millisecond) {
		for _, i := range []int{3, 4} {
			other := ids[7-i] // n4's is n5, n5's is n4
			for _, l := range nodes.punchLines(i) {
				failed = failed || (strings.Contains(l, other) && punchFailed.MatchString(l))
			}
		}
	}
	sym, v4 := link(3, 4)
	t.Logf("n4 (symmetric NAT): reachability %s, relays %v, link to n5 %q", v4.NAT.Reachability, v4.NAT.Relays, sym)
	for _, i := range []int{3, 4} {
		if pu := nodes.punchLines(i); len(pu) > 0 {
			t.Logf("n%d: %s", i+1, strings.Join(pu, "\n    "))
		}
	}
	if !failed {
		t.Errorf("no failed hole punch between n4 and n5 (symmetric NATs) within 90 s")
	}
	if sym != "relayed" {
		t.Errorf("n4 to n5 (both behind symmetric NATs): link %q, want relayed", sym)
	}

	// The swarm serves requests entered behind the symmetric NATs.
	for _, i := range []int{3, 4} {
		toks, err := nsComplete(ctx, nw.APIURL(i, 5001), 90*time.Second)
		if err != nil {
			t.Errorf("request entered at n%d: %v", i+1, err)
			continue
		}
		t.Logf("request entered at n%d (symmetric NAT) served: %d tokens", i+1, toks)
	}
	if t.Failed() {
		for i := range kinds {
			var v nsSwarmView
			if nsGetJSON(ctx, nw.APIURL(i, 5001)+"/v1/swarm", &v) == nil {
				b, _ := json.Marshal(v)
				t.Logf("n%d's view: %s", i+1, b)
			}
		}
	}
}

// punchFailed matches the swarm's log line of a failed hole punch.
var punchFailed = regexp.MustCompile(`"?ok"?[:=]\s*false`)

// nsSwarmView is the part of /v1/swarm the NAT tests read.
type nsSwarmView struct {
	Node  string `json:"node"`
	Model struct {
		ID string `json:"id"`
	} `json:"model"`
	NAT struct {
		Reachability string   `json:"reachability"`
		Relays       []string `json:"relays"`
		Unreachable  bool     `json:"unreachable"`
		Advice       string   `json:"advice"`
	} `json:"nat"`
	Members []struct {
		ID        string `json:"id"`
		Member    bool   `json:"member"`
		Connected bool   `json:"connected"`
		Relayed   bool   `json:"relayed"`
		Link      string `json:"link"`
	} `json:"members"`
}

// nsNodes runs strata node processes in a namespace network.
type nsNodes struct {
	t    *testing.T
	nw   *Namespaces
	dir  string
	bin  string
	cmds []*exec.Cmd
}

// start starts node i with TCP and QUIC listeners on port 4001 and
// returns, for the founder (boot ""), its TCP multiaddr.
func (n *nsNodes) start(ctx context.Context, i int, boot string) string {
	t := n.t
	ip := n.nw.Listen(i, 4001)
	quic := n.nw.ListenQUIC(i, 4001)
	args := []string{"node", "--data-dir", fmt.Sprintf("%s/n%d", n.dir, i+1), "--listen", ip + "," + quic,
		"--api", n.nw.APIBind(i, 5001), "--sim-model", "llama-3-8b", "--gpu", "rtx4090", "--max-layers", "16", "--log-peers", "0"}
	if boot != "" {
		args = append(args, "--bootstrap", boot)
	}
	c := n.nw.Command(context.WithoutCancel(ctx), i, n.bin, args...)
	logf, err := os.Create(n.log(i))
	if err != nil {
		t.Fatal(err)
	}
	c.Stdout, c.Stderr = logf, logf
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	n.cmds = append(n.cmds, c)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("n%d's log:\n%s", i+1, nsTail(string(b), 30))
		}
	})
	if boot != "" {
		return ""
	}
	want := regexp.MustCompile(regexp.QuoteMeta(fmt.Sprintf("/ip4/%s/tcp/4001/p2p/", n.nw.Addr(i))) + `[A-Za-z0-9]+`)
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(100 * time.Millisecond) {
		b, _ := os.ReadFile(n.log(i))
		if a := want.FindString(string(b)); a != "" {
			return a
		}
	}
	t.Fatalf("n%d printed no address", i+1)
	return ""
}

func (n *nsNodes) log(i int) string { return fmt.Sprintf("%s/n%d.log", n.dir, i+1) }

// punchLines are node i's log lines about hole punches.
func (n *nsNodes) punchLines(i int) []string {
	b, _ := os.ReadFile(n.log(i))
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "hole punch") {
			out = append(out, l)
		}
	}
	return out
}

func (n *nsNodes) stop() {
	for _, c := range n.cmds {
		c.Process.Signal(os.Interrupt)
	}
	for _, c := range n.cmds {
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			c.Process.Kill()
		}
	}
}

// nsComplete asks the API at base for a greedy completion of 4 tokens,
// retrying until the swarm serves or limit passes, and returns the
// tokens generated.
func nsComplete(ctx context.Context, base string, limit time.Duration) (int, error) {
	var v nsSwarmView
	if err := nsGetJSON(ctx, base+"/v1/swarm", &v); err != nil {
		return 0, err
	}
	body, _ := json.Marshal(map[string]any{"model": v.Model.ID, "prompt": "the swarm behind a symmetric NAT", "max_tokens": 4, "temperature": 0})
	var last error
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(time.Second) {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			last = err
			continue
		}
		var out struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		cancel()
		if resp.StatusCode == http.StatusOK && err == nil && len(out.Choices) == 1 && out.Usage.CompletionTokens > 0 {
			return out.Usage.CompletionTokens, nil
		}
		last = fmt.Errorf("%s, %d choices, usage %+v (decode: %v)", resp.Status, len(out.Choices), out.Usage, err)
	}
	return 0, fmt.Errorf("not served within %v: %w", limit, last)
}
