package cli

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/engine/store"
	"github.com/stratanet/strata/node"
	"github.com/stratanet/strata/swarm"
)

// strata node --model NAME, with NAME not in the store: the node learns
// the swarm's model from its bootstrap peer, joins by its fingerprint,
// fetches the layers it is placed on, and the store lists the name with
// the slice fetched. A later join by the same name checks the swarm still
// serves that model.
func TestNodeJoinsByStoreName(t *testing.T) {
	t.Setenv("STRATA_HOME", t.TempDir())
	model := filepath.Join(t.TempDir(), "m.gguf")
	if _, err := run(t, "model", "gen", "--out", model, "--layers", "4", "--seed", "5"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	founder, err := node.New(ctx, node.WithModelFile(model), node.WithDataDir(t.TempDir()), node.WithMaxLayers(2),
		node.WithThreads(1), node.WithLogger(zap.NewNop()),
		node.WithSwarmOptions(swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"), swarm.WithReachability(swarm.ReachabilityPublic),
			swarm.WithDiscovery(false)))
	if err != nil {
		t.Fatal(err)
	}
	defer founder.Close()
	ai := founder.AddrInfo()
	addrs, err := peer.AddrInfoToP2pAddrs(&ai)
	if err != nil || len(addrs) == 0 {
		t.Fatal(addrs, err)
	}
	fp := founder.Model().Fingerprint
	const name = "Acme/Tiny-GGUF:q8_0"
	dir := t.TempDir()
	args := []string{"node", "--model", name, "--bootstrap", addrs[0].String(), "--data-dir", dir,
		"--listen", "/ip4/127.0.0.1/tcp/0", "--reachability", "public", "--max-layers", "2", "--threads", "1", "--log-level", "error"}

	jctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	var out bytes.Buffer
	go func() {
		root := NewRoot()
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(args)
		done <- root.ExecuteContext(jctx)
	}()
	var slices []node.SliceFile
	for len(slices) == 0 {
		select {
		case err := <-done:
			t.Fatalf("the node stopped: %v\n%s", err, out.String())
		case <-ctx.Done():
			t.Fatalf("no slice fetched: %s", out.String())
		case <-time.After(100 * time.Millisecond):
		}
		slices, _ = node.Slices(dir, fp)
	}
	list, err := run(t, "model", "list")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(list, name) || !strings.Contains(list, fp[:16]) || !strings.Contains(list, "[") {
		t.Fatalf("model list does not show the partial model:\n%s", list)
	}
	t.Logf("slices %+v\n%s", slices, list)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("node: %v\n%s", err, out.String())
	}

	// The store noted another model under the name: the join is refused.
	s, err := openStore()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.NoteRemote(ctx, store.Remote{Name: name, Fingerprint: "0123456789abcdef0123", Dir: dir}); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, args...); err == nil || !strings.Contains(err.Error(), "when this store last joined it") {
		t.Fatalf("join under a name noted for another model: %v", err)
	}
	// A name with no swarm to ask is the store's not-found error.
	if _, err := run(t, "node", "--model", "Acme/Other-GGUF:q4_0", "--data-dir", t.TempDir()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown name without bootstrap peers: %v", err)
	}
}
