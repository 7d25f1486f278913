package swarm

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	madns "github.com/multiformats/go-multiaddr-dns"
	"golang.org/x/net/dns/dnsmessage"
)

// dnsServer answers TXT queries on loopback UDP from txt (name with the
// trailing dot: records), and nothing else: a real DNS server for Go's
// own resolver to ask.
func dnsServer(t testing.TB, txt map[string][]string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
			b.EnableCompression()
			b.StartQuestions()
			b.Question(q)
			b.StartAnswers()
			recs, ok := txt[q.Name.String()]
			if q.Type == dnsmessage.TypeTXT {
				for _, r := range recs {
					b.TXTResource(dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeTXT, Class: dnsmessage.ClassINET, TTL: 60},
						dnsmessage.TXTResource{TXT: []string{r}})
				}
			}
			if !ok {
				b = dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RCode: dnsmessage.RCodeNameError})
				b.StartQuestions()
				b.Question(q)
			}
			msg, err := b.Finish()
			if err == nil {
				pc.WriteTo(msg, from) //nolint:errcheck // the client retries
			}
		}
	}()
	return pc.LocalAddr().String()
}

// testResolver resolves through the server at addr only.
func testResolver(t testing.TB, addr string) *madns.Resolver {
	t.Helper()
	nr := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
	r, err := madns.NewResolver(madns.WithDefaultResolver(nr))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestBootstrapList: a swarm publishes its bootstrap peers as dnsaddr TXT
// records; a host given only /dnsaddr/NAME resolves them through a real
// DNS exchange, bootstraps from both and hears their heartbeats. A list
// that names no peer, or no such name, is refused with ErrConfig.
func TestBootstrapList(t *testing.T) {
	a := newTestHost(t)
	b := newTestHost(t, bootstrapOf(a))
	rec := func(h *Host) string {
		full, err := peer.AddrInfoToP2pAddrs(&peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()[:1]})
		if err != nil {
			t.Fatal(err)
		}
		return "dnsaddr=" + full[0].String()
	}
	srv := dnsServer(t, map[string][]string{
		"_dnsaddr.boot.swarm.test.":  {rec(a), rec(b), "unrelated=1"},
		"_dnsaddr.empty.swarm.test.": {"dnsaddr=/ip4/127.0.0.1/tcp/1"},
	})
	r := testResolver(t, srv)
	if !IsBootstrapList("/dnsaddr/boot.swarm.test") || IsBootstrapList("/dnsaddr/boot.swarm.test/p2p/"+a.ID().String()) {
		t.Fatal("IsBootstrapList")
	}
	j := newTestHost(t, WithDNSResolver(r), WithBootstrap("/dnsaddr/boot.swarm.test"))
	got := map[peer.ID]bool{}
	for _, ai := range j.disco.Bootstrap() {
		got[ai.ID] = true
	}
	if len(got) != 2 || !got[a.ID()] || !got[b.ID()] {
		t.Fatalf("bootstrap peers %v, want %s and %s", j.disco.Bootstrap(), a.ID(), b.ID())
	}
	waitFor(t, 10*time.Second, "heartbeats of both listed peers", func() bool {
		l := livePeers(j)
		return l[a.ID()] && l[b.ID()]
	})

	for _, name := range []string{"empty.swarm.test", "missing.swarm.test"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := New(ctx, WithListenAddrs(loopback), WithDNSResolver(r), WithBootstrap("/dnsaddr/"+name))
		cancel()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want ErrConfig naming it", name, err)
		}
	}
}
