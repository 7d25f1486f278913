package cli

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stratanet/strata/engine/store"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/node/api"
)

// swarmView is the part of GET /v1/swarm that `strata status` prints.
type swarmView struct {
	Node  string `json:"node"`
	Model struct {
		ID        string `json:"id"`
		Simulated bool   `json:"simulated"`
		Layers    int    `json:"layers"`
	} `json:"model"`
	Leader    *string         `json:"leader"`
	Committed layers.LayerMap `json:"committed"`
	Pending   *struct {
		Map    layers.LayerMap `json:"map"`
		Reason string          `json:"reason"`
	} `json:"pending"`
	NAT struct {
		Reachability string   `json:"reachability"`
		Forced       bool     `json:"forced"`
		Relays       []string `json:"relays"`
		Unreachable  bool     `json:"unreachable"`
		Advice       string   `json:"advice"`
		RelayService bool     `json:"relay_service"`
		RelayRate    float64  `json:"relay_rate_mb_per_s"`
		RelayedMB    float64  `json:"relayed_mb"`
	} `json:"nat"`
	Members   []memberView `json:"members"`
	StaticMap bool         `json:"static_map"`
	// Routable: the node can route a full path; NotReady says why not
	// (absent from a node too old to say).
	Routable bool   `json:"routable"`
	NotReady string `json:"not_ready"`
}

// memberView is one member of swarmView.
type memberView struct {
	ID           string  `json:"id"`
	Self         bool    `json:"self"`
	Member       bool    `json:"member"`
	Link         string  `json:"link"`
	Voter        bool    `json:"voter"`
	State        string  `json:"state"`
	Liveness     string  `json:"liveness"`
	Relayed      bool    `json:"relayed"`
	LinkMBs      float64 `json:"link_mb_per_s"`
	Engine       string  `json:"engine"`
	Capabilities *struct {
		Hardware  layers.Hardware
		MaxLayers int
	} `json:"capabilities"`
	Load *struct {
		QueueDepth     int `json:"queue_depth"`
		ActiveSessions int `json:"active_sessions"`
	} `json:"load"`
	Fetch *struct {
		Done    int64 `json:"done_bytes"`
		Total   int64 `json:"total_bytes"`
		Fetched int64 `json:"fetched_bytes"`
	} `json:"fetch"`
}

func newStatusCmd() *cobra.Command {
	var (
		apiURL, keyFile string
		wait            time.Duration
		names           map[string]string
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "print a swarm's committed layer map and members, as one node's API sees them",
		Long: `status asks one node's API for its view of the swarm (GET /v1/swarm) and
prints the model, the epoch, the leader and one line per stage of the
committed map: the node, its layers, its device, its state and its queue,
then the members the map does not place. A node that cannot route a full
path says why: with no map committed yet, which layers no node can hold
and what the swarm waits for. With --wait it first waits until the node can route a full path (its map
covers every layer and its hops are heard from and serve). --name ID=NAME shows a peer ID as NAME (testnet/up.sh uses n1..nN).`,
		Example: `  strata status --api http://127.0.0.1:8080
  strata status --api http://127.0.0.1:5001 --wait 60s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := apiClient(apiURL, keyFile)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if wait > 0 {
				if err := waitReady(ctx, c, wait); err != nil {
					return err
				}
			}
			var v swarmView
			if err := c.Swarm(ctx, &v); err != nil {
				return err
			}
			printStatus(cmd.OutOrStdout(), v, peerNamer(names))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&apiURL, "api", "http://127.0.0.1:8080", "a node's API URL")
	fl.StringVar(&keyFile, "api-key-file", "", "file holding the API key, if the node requires one")
	fl.DurationVar(&wait, "wait", 0, "first wait up to this long for the swarm to serve every layer")
	fl.StringToStringVar(&names, "name", nil, "show peer ID as a name (ID=NAME, repeatable)")
	return cmd
}

// apiClient is the API client of the commands that talk to a node.
func apiClient(apiURL, keyFile string) (*api.Client, error) {
	var opts []api.ClientOption
	if keyFile != "" {
		key, err := api.ReadKeyFile(keyFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, api.WithClientKey(key))
	}
	return api.NewClient(apiURL, opts...)
}

// waitReady polls the node until it can route a full path (its map
// covers every layer and it has heard from the hops).
// Unreachable is retried too: the node may still be starting.
func waitReady(ctx context.Context, c *api.Client, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last error
	why := ""
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		w, err := c.NotReady(rctx)
		rcancel()
		if err == nil && w == "" {
			return nil
		}
		switch {
		case err == nil:
			why, last = w, nil
		case ctx.Err() == nil: // not the wait's own end
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("the swarm did not serve within %v: %w", limit, last)
			}
			if why != "" {
				return fmt.Errorf("the swarm did not serve within %v: %s", limit, why)
			}
			return fmt.Errorf("the swarm did not serve within %v: it cannot route a full path yet", limit)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

var peerIDPattern = regexp.MustCompile(`12D3KooW[1-9A-HJ-NP-Za-km-z]{44}`)

// peerNamer shows a peer ID by its given name, else by its last 6
// characters (enough to tell a swarm's nodes apart on screen).
func peerNamer(names map[string]string) func(string) string {
	return func(id string) string {
		if n, ok := names[id]; ok {
			return n
		}
		if len(id) > 6 {
			return "…" + id[len(id)-6:]
		}
		return id
	}
}

// namePeers replaces every peer ID in s (a path, say) by its name.
func namePeers(s string, name func(string) string) string {
	return peerIDPattern.ReplaceAllStringFunc(s, name)
}

func printStatus(w io.Writer, v swarmView, name func(string) string) {
	kind := "real engine"
	if v.Model.Simulated {
		kind = "SIMULATED"
	}
	leader := "none"
	if v.Leader != nil {
		leader = name(*v.Leader)
	}
	m := v.Committed
	if m.Layers == 0 {
		fmt.Fprintf(w, "model %s (%s), %d layers; no layer map committed yet; leader %s\n", v.Model.ID, kind, v.Model.Layers, leader)
	} else {
		cover := "covers every layer"
		if !m.Covers() {
			cover = "DOES NOT cover every layer"
		} else if gaps := leftGaps(m, v.Members); len(gaps) > 0 {
			gs := make([]string, len(gaps))
			for i, g := range gaps {
				gs[i] = g.String()
			}
			cover = "covers every layer, but only nodes that left the swarm hold " + strings.Join(gs, ", ")
		}
		fmt.Fprintf(w, "model %s (%s), %d layers; epoch %d, leader %s; the map %s\n", v.Model.ID, kind, m.Layers, m.Epoch, leader, cover)
	}
	if !v.Routable && v.NotReady != "" {
		fmt.Fprintf(w, "  not serving: %s\n", v.NotReady)
	}
	byID := map[string]int{}
	anyMember := false // false: a node too old to say who is a member
	for i, mem := range v.Members {
		byID[mem.ID] = i
		anyMember = anyMember || mem.Member
	}
	stages := slices.Clone(m.Stages)
	slices.SortFunc(stages, func(a, b layers.Stage) int {
		if a.Start != b.Start {
			return a.Start - b.Start
		}
		return a.End - b.End
	})
	for _, st := range stages {
		var extra []string
		if i, ok := byID[st.Node]; ok {
			extra = memberExtras(v.Members[i])
			if !v.Members[i].Member && anyMember && !v.StaticMap {
				extra = append(extra, "left the swarm")
			}
		}
		if v.Leader != nil && st.Node == *v.Leader {
			extra = append(extra, "leader")
		}
		line := fmt.Sprintf("  %-8s layers [%d,%d)  %s", name(st.Node), st.Start, st.End, strings.Join(extra, ", "))
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	// Members the map does not place (all of them while no map is
	// committed), with what each may hold.
	for _, mem := range v.Members {
		if _, placed := m.Range(mem.ID); placed || !mem.Member {
			continue
		}
		extra := memberExtras(mem)
		if c := mem.Capabilities; c != nil && c.MaxLayers > 0 {
			extra = append(extra, fmt.Sprintf("max %d layers", c.MaxLayers))
		}
		if v.Leader != nil && mem.ID == *v.Leader {
			extra = append(extra, "leader")
		}
		line := fmt.Sprintf("  %-8s no layers      %s", name(mem.ID), strings.Join(extra, ", "))
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	if p := v.Pending; p != nil {
		fmt.Fprintf(w, "pending map (epoch %d, %s): nodes are warming up their new layers\n", p.Map.Epoch, p.Reason)
	}
	for _, mem := range v.Members {
		if f := mem.Fetch; f != nil && f.Total > 0 {
			fmt.Fprintf(w, "  %-8s fetching its layers from peers: %s of %s (%.0f%%)\n", name(mem.ID),
				store.HumanBytes(f.Done), store.HumanBytes(f.Total), 100*float64(f.Done)/float64(f.Total))
		}
	}
	printReachability(w, v, name)
}

// leftGaps are the layers of m that only nodes no longer members hold
// (as the members list says; none when it names no member at all, as a
// node too old to say does).
func leftGaps(m layers.LayerMap, members []memberView) []layers.Range {
	member := map[string]bool{}
	for _, mem := range members {
		if mem.Member {
			member[mem.ID] = true
		}
	}
	if len(member) == 0 {
		return nil
	}
	kept := m
	for _, id := range m.Nodes() {
		if !member[id] {
			kept = kept.Without(id)
		}
	}
	return kept.Gaps()
}

// memberExtras is what status says of a member after its layers: its
// device, engine, state, liveness, load, vote and link.
func memberExtras(mem memberView) []string {
	var extra []string
	if mem.Capabilities != nil && mem.Capabilities.Hardware.Name != "" {
		extra = append(extra, mem.Capabilities.Hardware.Name)
	}
	if mem.Engine != "" {
		// Only the go engine is bit-reproducible across hosts.
		extra = append(extra, "engine "+mem.Engine)
	}
	if mem.State != "" {
		extra = append(extra, mem.State)
	}
	if mem.Liveness != "" && mem.Liveness != "alive" && mem.Liveness != "self" {
		extra = append(extra, mem.Liveness)
	}
	if mem.Load != nil {
		extra = append(extra, fmt.Sprintf("queue %d, %d sessions", mem.Load.QueueDepth, mem.Load.ActiveSessions))
	}
	if mem.Voter {
		extra = append(extra, "voter")
	}
	switch {
	case mem.Link != "" && mem.Link != "direct":
		extra = append(extra, mem.Link)
	case mem.Relayed:
		extra = append(extra, "relayed")
	}
	return extra
}

// printReachability prints the answering node's reachability, the
// relays it holds, what that means, and how it is linked to each peer.
func printReachability(w io.Writer, v swarmView, name func(string) string) {
	n := v.NAT
	if n.Reachability == "" {
		return // a node too old to report it
	}
	line := fmt.Sprintf("node %s: reachability %s", name(v.Node), n.Reachability)
	if n.Forced {
		line += " (configured)"
	}
	if len(n.Relays) > 0 {
		rs := make([]string, len(n.Relays))
		for i, r := range n.Relays {
			rs[i] = name(r)
		}
		line += ", relay slots on " + strings.Join(rs, " ")
	}
	if n.RelayService {
		rate := "no rate cap"
		if n.RelayRate > 0 {
			rate = fmt.Sprintf("capped at %.1f MB/s", n.RelayRate)
		}
		line += fmt.Sprintf(", relayed %.1f MB for others (%s)", n.RelayedMB, rate)
	}
	fmt.Fprintf(w, "%s\n  %s\n", line, n.Advice)
	var links []string
	for _, mem := range v.Members {
		if !mem.Self && mem.Link != "" {
			l := name(mem.ID) + " " + mem.Link
			if mem.Link == "relayed" && mem.LinkMBs > 0 {
				l += fmt.Sprintf(" (%.1f MB/s measured)", mem.LinkMBs)
			}
			links = append(links, l)
		}
	}
	if len(links) > 0 {
		fmt.Fprintf(w, "links from %s: %s\n", name(v.Node), strings.Join(links, ", "))
	}
}
