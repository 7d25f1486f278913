package testnet

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/swarm"
)

// PublicSpec makes the scenario's swarm public: every node joins it by
// name through a public DHT played by DHTServers processes of `strata
// dht-server` (each in a namespace of its own on namespaces, in
// Region), with no --bootstrap address. The first node founds it
// (--found) and signs the nodes marked steward in as the stewards.
type PublicSpec struct {
	Swarm      string `yaml:"swarm"`
	DHTServers int    `yaml:"dht_servers"`
	Region     string `yaml:"region"`
}

// JoinReport is one start of a node that joined by name: how long from
// the process's start until its own view listed it as a member (-1:
// never, while it ran).
type JoinReport struct {
	Node  string  `json:"node"`
	Start int     `json:"start"` // 1 for the first start, 2 for a rejoin...
	JoinS float64 `json:"join_s"`
	// Founder: the node founded the swarm (--found) rather than finding
	// it; its time is its start's.
	Founder bool `json:"founder,omitempty"`
}

func (p *PublicSpec) validate(s *Scenario, regions map[string]bool) error {
	switch {
	case strings.TrimSpace(p.Swarm) == "" || p.Swarm == swarm.DefaultSwarmName:
		return bad("public.swarm", "%q: a public swarm needs a name of its own", p.Swarm)
	case p.DHTServers < 1 || p.DHTServers > 16:
		return bad("public.dht_servers", "%d outside 1..16", p.DHTServers)
	case p.Region != "" && !regions[p.Region]:
		return bad("public.region", "%q is not in network.regions", p.Region)
	case p.Region != "" && s.Network.Mode != ModeNamespaces:
		return bad("public.region", "needs network.mode %s", ModeNamespaces)
	}
	return nil
}

// placements are the DHT servers' places on the network, after the
// nodes'.
func (p *PublicSpec) placements() []Placement {
	var out []Placement
	for k := range p.DHTServers {
		out = append(out, Placement{Name: fmt.Sprintf("dht%d", k+1), Region: p.Region})
	}
	return out
}

// stewardIDs makes the identities of the nodes marked steward in their
// data dirs now, so that the founder can name them at its start.
func (c *cluster) stewardIDs() ([]string, error) {
	var ids []string
	for _, p := range c.procs {
		if !p.spec.Steward {
			continue
		}
		sk, err := swarm.LoadOrCreateIdentity(p.dir)
		if err != nil {
			return nil, fmt.Errorf("identity of %s: %w", p.spec.Name, err)
		}
		id, err := peer.IDFromPrivateKey(sk)
		if err != nil {
			return nil, fmt.Errorf("identity of %s: %w", p.spec.Name, err)
		}
		ids = append(ids, id.String())
	}
	return ids, nil
}

// startDHTServers starts the public DHT's stand-ins, each bootstrapped
// from those before it, and returns their addresses.
func (c *cluster) startDHTServers(ctx context.Context, n int) ([]string, error) {
	used := map[int]bool{}
	for _, p := range c.procs {
		used[p.port], used[p.apiPort] = true, true
	}
	var addrs []string
	for k := range n {
		i := len(c.procs) + k
		name := fmt.Sprintf("dht%d", k+1)
		p := &proc{i: i, spec: NodeSpec{Name: name}, stopped: true, dir: filepath.Join(c.run, name),
			out: filepath.Join(c.run, name+".out"), log: filepath.Join(c.run, name+".log")}
		var err error
		if p.port, err = distinctPort(used, freePort); err != nil {
			return nil, fmt.Errorf("port for %s: %w", name, err)
		}
		args := []string{"dht-server", "--data-dir", p.dir, "--listen", c.net.Listen(i, p.port)}
		if len(addrs) > 0 {
			args = append(args, "--bootstrap", strings.Join(addrs, ","))
		}
		if err := c.launch(ctx, p, args); err != nil {
			return nil, err
		}
		c.dhts = append(c.dhts, p)
		addrs = append(addrs, p.addr)
	}
	return addrs, nil
}

// publicArgs are the flags of a node of a public swarm: the name and the
// public DHT, no bootstrap; the founder founds and names the stewards.
func (c *cluster) publicArgs(p *proc) []string {
	args := []string{"--swarm", c.public.Swarm, "--dht-bootstrap", strings.Join(c.dhtAddrs, ",")}
	if p.i == 0 {
		args = append(args, "--found")
		if len(c.stewards) > 0 {
			args = append(args, "--stewards", strings.Join(c.stewards, ","))
		}
	}
	return args
}

// watchJoin measures how long p's current start takes to join: from the
// process's start until its own /v1/swarm lists it as a member. It gives
// up when the process stops or ctx ends (the join then counts as never).
func (r *run) watchJoin(ctx context.Context, p *proc) {
	p.mu.Lock()
	start, began := p.starts, p.startedAt[len(p.startedAt)-1]
	p.mu.Unlock()
	rec := JoinReport{Node: p.spec.Name, Start: start, JoinS: -1, Founder: p.i == 0}
	defer func() {
		r.mu.Lock()
		r.joins = append(r.joins, rec)
		r.mu.Unlock()
		if rec.JoinS >= 0 {
			r.logf("%s joined by name %.1f s after its start %d", p.spec.Name, rec.JoinS, start)
		}
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if v, err := p.swarmView(ctx); err == nil {
			for _, m := range v.Members {
				if m.Self && m.Member {
					rec.JoinS = secs(time.Since(began))
					return
				}
			}
		}
		p.mu.Lock()
		gone := p.starts != start || p.stopped
		p.mu.Unlock()
		if gone || p.crashed() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// checkJoins holds every join by name to expect.max_join.
func checkJoins(sc *Scenario, joins []JoinReport) []string {
	limit := sc.Expect.MaxJoin
	if sc.Public == nil || limit <= 0 {
		return nil
	}
	var out []string
	for _, j := range joins {
		switch {
		case j.JoinS < 0:
			out = append(out, fmt.Sprintf("%s (start %d) never joined by name", j.Node, j.Start))
		case j.Founder:
			// Founding is no join by name; its time is reported only.
		case j.JoinS > limit.Seconds():
			out = append(out, fmt.Sprintf("%s (start %d) joined by name in %.1f s > %v", j.Node, j.Start, j.JoinS, limit))
		}
	}
	return out
}

func joinsMarkdown(b *strings.Builder, joins []JoinReport) {
	if len(joins) == 0 {
		return
	}
	b.WriteString("\nJoins by name (process start to member):\n\n| node | start | seconds |\n|---|---:|---:|\n")
	for _, j := range joins {
		s := "never"
		if j.JoinS >= 0 {
			s = strconv.FormatFloat(j.JoinS, 'f', 1, 64)
		}
		name := j.Node
		if j.Founder {
			name += " (founded it)"
		}
		fmt.Fprintf(b, "| %s | %d | %s |\n", name, j.Start, s)
	}
}
