package cli

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/swarm"
)

// TestDHTServerCommand: `strata dht-server` prints its address, and two
// hosts of a public swarm bootstrapped from it alone meet by name; the
// command ends with its context.
func TestDHTServerCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	root := NewRoot()
	root.SetOut(pw)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"dht-server", "--listen", "/ip4/127.0.0.1/tcp/0", "--log-level", "warn"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx); pw.Close() }()

	var addr string
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
			addr = a
			break
		}
	}
	go io.Copy(io.Discard, pr) //nolint:errcheck // drain the rest
	ai, err := peer.AddrInfoFromString(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	host := func(extra ...swarm.Option) *swarm.Host {
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		defer scancel()
		h, err := swarm.New(sctx, append([]swarm.Option{swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"), swarm.WithReachability(swarm.ReachabilityPublic),
			swarm.WithSwarmName("cli-pub"), swarm.WithModelFingerprint("fp"), swarm.WithPublicDHT(*ai)}, extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return h
	}
	founder := host(swarm.WithFounder()) // signs the charter a joiner checks
	founder.Discovery().AdvertisePublic()
	joiner := host()
	fctx, fcancel := context.WithTimeout(ctx, 20*time.Second)
	defer fcancel()
	found, err := joiner.Discovery().FindSwarm(fctx)
	if err != nil || len(found) != 1 || found[0].ID != founder.ID() {
		t.Fatalf("found %v (%v), want the founder %s", found, err, founder.ID())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("dht-server ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("dht-server did not end with its context")
	}
}
