package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/monitor"
	"github.com/stratanet/strata/node"
	"github.com/stratanet/strata/swarm"
)

// strata monitor --once --json over a one-node swarm that serves every
// layer: the report lists it, signed, direct, covering the model; the
// table says the same; with no starting point the command says what to
// give.
func TestMonitorCommand(t *testing.T) {
	for _, args := range [][]string{{"--once"}, {"--once", "--public", "--swarm", "lab"}, {"--once", "--bootstrap", "/ip4/1.2.3.4/tcp/1"}} {
		if _, err := run(t, append([]string{"monitor"}, args...)...); !errors.Is(err, monitor.ErrConfig) {
			t.Errorf("monitor %v: %v, want ErrConfig", args, err)
		}
	}
	model := filepath.Join(t.TempDir(), "m.gguf")
	if _, err := run(t, "model", "gen", "--out", model, "--layers", "4", "--seed", "5"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.New(ctx, node.WithModelFile(model), node.WithDataDir(t.TempDir()), node.WithThreads(1), node.WithLogger(zap.NewNop()),
		node.WithSwarmOptions(swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"), swarm.WithReachability(swarm.ReachabilityPublic),
			swarm.WithDiscovery(false), swarm.WithHeartbeatInterval(100*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := n.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	ai := n.AddrInfo()
	addrs, err := peer.AddrInfoToP2pAddrs(&ai)
	if err != nil || len(addrs) == 0 {
		t.Fatal(addrs, err)
	}
	// The node announces serving in the heartbeat after its status says
	// so: run the command until its report shows that heartbeat.
	var out string
	var rep monitor.Report
	for {
		out, err = run(t, "monitor", "--once", "--json", "--bootstrap", addrs[0].String())
		if err != nil {
			t.Fatal(err)
		}
		rep = monitor.Report{}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		if len(rep.Swarms) != 1 || len(rep.Swarms[0].Nodes) != 1 {
			t.Fatalf("report:\n%s", out)
		}
		if rep.Swarms[0].Nodes[0].State == "serving" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the node never announced serving:\n%s", out)
		case <-time.After(50 * time.Millisecond):
		}
	}
	sw, nd := rep.Swarms[0], rep.Swarms[0].Nodes[0]
	if !sw.Coverage.Covered || sw.Layers != 4 || sw.Fingerprint != n.Model().Fingerprint || nd.ID != n.ID().String() ||
		!nd.Verified || nd.Reachability != monitor.ReachDirect || nd.RangeStart != 0 || nd.RangeEnd != 4 {
		t.Fatalf("report:\n%s", out)
	}
	table, err := run(t, "monitor", "--once", "--bootstrap", addrs[0].String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"every layer covered, redundancy 1-1", "[0,4)", "direct", "1 of 1 nodes verified"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}

	// Serving: the page's address is the first line out; /api/swarms
	// answers with the first crawl's report, and the command ends with
	// its context.
	sctx, stop := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		root := NewRoot()
		root.SetOut(pw)
		root.SetErr(io.Discard)
		root.SetArgs([]string{"monitor", "--listen", "127.0.0.1:0", "--every", "200ms", "--bootstrap", addrs[0].String()})
		done <- root.ExecuteContext(sctx)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr) //nolint:errcheck // drain the rest
	f := strings.Fields(line)
	if len(f) < 4 || !strings.HasPrefix(f[3], "http://") {
		t.Fatalf("first line %q", line)
	}
	base := strings.TrimSuffix(f[3], "/")
	for {
		rep, err := getJSON(ctx, base+"/api/swarms")
		if err != nil {
			t.Fatal(err)
		}
		if rep.Crawls > 0 && len(rep.Swarms) == 1 && rep.Swarms[0].Verified == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the served report never listed the node: %+v", rep)
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("the command ended with %v", err)
	}
}

func getJSON(ctx context.Context, url string) (monitor.Report, error) {
	var rep monitor.Report
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return rep, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return rep, err
	}
	defer resp.Body.Close()
	return rep, json.NewDecoder(resp.Body).Decode(&rep)
}
