package swarm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/discovery"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	drouting "github.com/libp2p/go-libp2p/p2p/discovery/routing"
	"go.uber.org/zap"
)

// Rendezvous is the DHT key under which the members of a swarm serving a
// model advertise themselves.
func Rendezvous(swarm, model string) string {
	if model == "" {
		model = "-"
	}
	return "strata/" + swarm + "/" + model + "/rendezvous/1"
}

// discoverer finds swarm members through the DHT. Found peers are hints:
// they are dialled and put in the peer table, and only their heartbeats
// make them alive.
type discoverer struct {
	h   *Host
	dht *dht.IpfsDHT
	rd  *drouting.RoutingDiscovery
	ns  string

	kick chan struct{} // re-advertise now (our addresses changed)

	mu      sync.Mutex
	dialing map[peer.ID]bool
}

func newDiscoverer(h *Host) (*discoverer, error) {
	// Server mode: in auto mode the DHT waits for AutoNAT to call the host
	// public, which never happens on private addresses, and then neither
	// answers nor is asked.
	d, err := dht.New(h.h,
		dht.Mode(dht.ModeServer),
		dht.ProtocolPrefix(ProtocolDHTPrefix),
		dht.BootstrapPeers(h.cfg.bootstrap...),
		dht.DisableValues(),
	)
	if err != nil {
		return nil, fmt.Errorf("dht: %w", err)
	}
	return &discoverer{
		h:       h,
		dht:     d,
		rd:      drouting.NewRoutingDiscovery(d),
		ns:      Rendezvous(h.cfg.swarmName, h.cfg.model),
		kick:    make(chan struct{}, 1),
		dialing: map[peer.ID]bool{},
	}, nil
}

func (d *discoverer) close() error { return d.dht.Close() }

// readvertise asks the advertise loop to run now.
func (d *discoverer) readvertise() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// advertise puts our provider record under the rendezvous key, retrying
// failures with exponential backoff (go-libp2p's helper retries only
// every two minutes) and refreshing it after success.
func (d *discoverer) advertise(ctx context.Context) {
	c := d.h.cfg
	wait := c.advertiseMin
	for {
		var next time.Duration
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ttl, err := d.rd.Advertise(actx, d.ns)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			d.h.log.Debug("advertise failed", zap.String("key", d.ns), zap.Duration("retry", wait), zap.Error(err))
			next = wait
			wait = min(2*wait, c.advertiseMax)
		} else {
			d.h.log.Debug("advertised", zap.String("key", d.ns), zap.Duration("ttl", ttl))
			wait = c.advertiseMin
			next = c.advertiseMax
			if ttl > 0 {
				next = min(next, ttl/2)
			}
		}
		next += time.Duration(rand.Int64N(int64(next/10) + 1))
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
		case <-time.After(next):
		}
	}
}

// find looks up the rendezvous key, hints what it finds to the peer
// table and dials the peers we are not connected to. It looks often while
// it keeps finding new peers and backs off to a minute when nothing
// changes.
func (d *discoverer) find(ctx context.Context) {
	base := d.h.cfg.findInterval
	wait := base
	for {
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		n, err := d.findOnce(fctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			d.h.log.Debug("find peers failed", zap.Error(err))
		}
		if n > 0 || err != nil {
			wait = base
		} else {
			wait = min(2*wait, max(time.Minute, base))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// findOnce reports how many peers it found that we were not connected to.
func (d *discoverer) findOnce(ctx context.Context) (int, error) {
	ch, err := d.rd.FindPeers(ctx, d.ns, discovery.Limit(256))
	if err != nil {
		return 0, err
	}
	fresh := 0
	for ai := range ch {
		if ai.ID == d.h.h.ID() || ai.ID == "" {
			continue
		}
		d.h.table.hint(ai)
		if d.h.h.Network().Connectedness(ai.ID) == network.Connected {
			continue
		}
		fresh++
		d.dial(ai)
	}
	return fresh, nil
}

// dial connects to ai in the background, once at a time per peer.
func (d *discoverer) dial(ai peer.AddrInfo) {
	d.mu.Lock()
	if d.dialing[ai.ID] {
		d.mu.Unlock()
		return
	}
	d.dialing[ai.ID] = true
	d.mu.Unlock()
	d.h.goLoop(func(ctx context.Context) {
		defer func() {
			d.mu.Lock()
			delete(d.dialing, ai.ID)
			d.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if len(ai.Addrs) == 0 {
			found, err := d.dht.FindPeer(ctx, ai.ID)
			if err != nil {
				d.h.log.Debug("find peer failed", zap.Stringer("peer", ai.ID), zap.Error(err))
				return
			}
			ai = found
		}
		if err := d.h.h.Connect(network.WithAllowLimitedConn(ctx, "discovery"), ai); err != nil {
			d.h.log.Debug("dial failed", zap.Stringer("peer", ai.ID), zap.Error(err))
		}
	})
}
