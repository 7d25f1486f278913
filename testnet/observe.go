package testnet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/layers"
)

// swarmView is the part of /v1/swarm the runner reads.
type swarmView struct {
	Node      string          `json:"node"`
	Leader    *string         `json:"leader"`
	Epoch     uint64          `json:"epoch"`
	Committed layers.LayerMap `json:"committed"`
	Pending   *struct{}       `json:"pending"` // nil: no map change pending
	Members   []struct {
		ID        string        `json:"id"`
		Self      bool          `json:"self"`
		Member    bool          `json:"member"`
		State     string        `json:"state"`
		Liveness  string        `json:"liveness"`
		Link      string        `json:"link"`
		LinkMBs   float64       `json:"link_mb_per_s"`
		Committed *layers.Range `json:"committed_range"`
		Load      *struct {
			Stolen     int `json:"stolen"`
			StolenFrom int `json:"stolen_from"`
		} `json:"load"`
	} `json:"members"`
	NAT struct {
		Reachability string   `json:"reachability"`
		Relays       []string `json:"relays"`
		Unreachable  bool     `json:"unreachable"`
		RelayedMB    float64  `json:"relayed_mb"`
	} `json:"nat"`
}

// reachability asks every running node how it is reachable and how it is
// linked to each peer, at the end of the load: which links hole punching
// made direct and which stayed relayed.
func (r *run) reachability(ctx context.Context) []NodeReach {
	var out []NodeReach
	for _, p := range r.c.procs {
		if p.apiURL == "" || !p.running() {
			continue
		}
		v, err := p.swarmView(ctx)
		if err != nil {
			out = append(out, NodeReach{Node: p.spec.Name, Err: err.Error()})
			continue
		}
		nr := NodeReach{Node: p.spec.Name, Reachability: v.NAT.Reachability, Unreachable: v.NAT.Unreachable,
			RelayedMB: v.NAT.RelayedMB, Links: map[string]string{}}
		for _, id := range v.NAT.Relays {
			nr.Relays = append(nr.Relays, r.nameOf(id))
		}
		for _, m := range v.Members {
			if m.Self && m.Load != nil {
				nr.Stolen, nr.StolenFrom = m.Load.Stolen, m.Load.StolenFrom
			}
			if !m.Self && m.Link != "" {
				l := m.Link
				if m.Link == "relayed" && m.LinkMBs > 0 {
					l += fmt.Sprintf(" %.1f MB/s", m.LinkMBs)
				}
				nr.Links[r.nameOf(m.ID)] = l
			}
		}
		out = append(out, nr)
	}
	return out
}

// verifyStats asks every running node for its entry's spot checks, at
// the end of the load (nil when the scenario neither checks nor lies).
func (r *run) verifyStats(ctx context.Context) []NodeVerify {
	used := r.sc.VerifyRate != nil
	for _, n := range r.sc.Nodes {
		used = used || n.Fault != "" || n.VerifyRate != nil
	}
	if !used {
		return nil
	}
	var out []NodeVerify
	for _, p := range r.c.procs {
		if p.apiURL == "" || !p.running() {
			continue
		}
		var v verifyView
		err := errors.New("the runner cannot reach its API")
		if p.client != nil {
			vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = p.client.Verify(vctx, &v)
			cancel()
		}
		if err != nil {
			out = append(out, NodeVerify{Node: p.spec.Name, Err: err.Error(), FirstMismatchS: -1})
			continue
		}
		out = append(out, nodeVerify(p.spec.Name, v, r.t0, r.nameOf))
	}
	return out
}

// swarm reads /v1/swarm from the first live node in scenario order, so
// that successive polls ask the same node while it lives (nodes differ in
// what they know, a restarted one most of all), and without moving the
// clients' round robin.
func (r *run) swarm(ctx context.Context) (swarmView, *proc, error) {
	var last error = errors.New("no live node to ask")
	for _, p := range r.c.procs {
		r.mu.Lock()
		ok := r.ready[p] && p.apiURL != "" && p.running()
		r.mu.Unlock()
		if !ok {
			continue
		}
		v, err := p.swarmView(ctx)
		if err != nil {
			last = err
			continue
		}
		return v, p, nil
	}
	return swarmView{}, nil, last
}

func (r *run) nameOf(peerID string) string {
	for _, p := range append(slices.Clone(r.c.procs), r.c.dhts...) {
		p.mu.Lock()
		id := p.peerID
		p.mu.Unlock()
		if id == peerID {
			return p.spec.Name
		}
	}
	if len(peerID) > 8 {
		return "?" + peerID[len(peerID)-8:]
	}
	return "?" + peerID
}

// poll records the committed map as a live node sees it, every 200 ms.
func (r *run) poll(ctx context.Context) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		call := time.Now()
		if v, p, err := r.swarm(ctx); err == nil {
			ret := time.Now()
			p.mu.Lock()
			life := p.starts
			p.mu.Unlock()
			s := sample{At: time.Since(r.t0), Node: p.spec.Name, Epoch: v.Committed.Epoch, Covers: v.Committed.Covers(),
				Life: life, Hash: consensus.MapHash(v.Committed), Call: call, Return: ret}
			if v.Leader != nil {
				s.Leader = r.nameOf(*v.Leader)
			}
			live := layers.LayerMap{Layers: v.Committed.Layers}
			for _, st := range v.Committed.Stages {
				name := r.nameOf(st.Node)
				s.Stages = append(s.Stages, fmt.Sprintf("%s[%d,%d)", name, st.Start, st.End))
				if q := r.c.byName(name); q != nil && q.running() {
					live.Stages = append(live.Stages, st)
				}
			}
			s.Healthy = live.Covers()
			r.mu.Lock()
			r.samples = append(r.samples, s)
			r.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
