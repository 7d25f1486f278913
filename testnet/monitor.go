package testnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/stratanet/strata/monitor"
)

// A scenario with monitor: true runs `strata monitor --once --json` at the
// end of the load, from the first node's network (through the public
// DHT's stand-ins in a public swarm, else from the first node's address),
// and holds what it reports to what the nodes say of themselves over
// their APIs: every running node listed and signed, the coverage of the
// committed map, and each node's reachability class from its own NAT
// verdict and links.

// MonitorReport is what the monitor saw, checked.
type MonitorReport struct {
	Swarms  int           `json:"swarms"`
	Covered bool          `json:"covered"`
	Runs    string        `json:"runs"` // [start,end)xnodes, as the monitor counted
	Nodes   []MonitorNode `json:"nodes"`
	Err     string        `json:"error,omitempty"`
	// Violations are the disagreements with the nodes' own views.
	Violations []string `json:"violations,omitempty"`
}

// MonitorNode is one node as the monitor showed it, and the class the
// node's own view gives (Want).
type MonitorNode struct {
	Node         string `json:"node"`
	Reachability string `json:"reachability"`
	Want         string `json:"want"`
	Verified     bool   `json:"verified"`
	Asked        string `json:"asked"` // "direct" or "via NAME"
}

// wantReach is the class a node's own diagnosis gives: public is direct;
// behind NAT, a hole-punched link makes it hole-punched, else relayed.
func wantReach(nr NodeReach) string {
	if nr.Reachability == "public" {
		return monitor.ReachDirect
	}
	for _, l := range nr.Links {
		if strings.HasPrefix(l, "hole-punched") {
			return monitor.ReachHolePunched
		}
	}
	if nr.Reachability == "private" {
		return monitor.ReachRelayed
	}
	return monitor.ReachUnknown
}

// monitor runs the monitor and checks it against reach (the nodes' own
// diagnoses) and the committed map a live node routes on.
func (r *run) monitor(ctx context.Context, reach []NodeReach) *MonitorReport {
	mr := &MonitorReport{}
	var first *proc
	for _, p := range r.c.procs {
		if p.running() && p.addr != "" {
			first = p
			break
		}
	}
	if first == nil {
		mr.Err = "no running node to start from"
		mr.Violations = append(mr.Violations, "monitor: "+mr.Err)
		return mr
	}
	args := []string{"monitor", "--once", "--json", "--timeout", "10s"}
	if r.c.public != nil && len(r.c.dhtAddrs) > 0 {
		args = append(args, "--dht-bootstrap", strings.Join(r.c.dhtAddrs, ","))
	} else {
		args = append(args, "--bootstrap", first.addr)
	}
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := r.c.net.Command(mctx, first.i, r.o.bin, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		mr.Err = fmt.Sprintf("strata monitor: %v", err)
		mr.Violations = append(mr.Violations, "monitor: "+mr.Err)
		return mr
	}
	var rep monitor.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		mr.Err = fmt.Sprintf("strata monitor's report: %v", err)
		mr.Violations = append(mr.Violations, "monitor: "+mr.Err)
		return mr
	}
	mr.Swarms = len(rep.Swarms)
	if len(rep.Swarms) != 1 {
		mr.Violations = append(mr.Violations, fmt.Sprintf("monitor: %d swarms listed, want 1", len(rep.Swarms)))
		return mr
	}
	sw := rep.Swarms[0]
	mr.Covered = sw.Coverage.Covered
	var runs []string
	var perLayer []int
	for _, run := range sw.Coverage.Runs {
		runs = append(runs, fmt.Sprintf("[%d,%d)x%d", run.Start, run.End, run.Nodes))
		for range run.End - run.Start {
			perLayer = append(perLayer, run.Nodes)
		}
	}
	mr.Runs = strings.Join(runs, " ")
	if v, _, err := r.swarm(ctx); err == nil && v.Committed.Layers > 0 {
		if want := v.Committed.Coverage(); !slices.Equal(perLayer, want) {
			mr.Violations = append(mr.Violations, fmt.Sprintf("monitor: coverage %s, the committed map's %v", mr.Runs, want))
		}
	}
	shown := map[string]monitor.Node{}
	for _, n := range sw.Nodes {
		shown[r.nameOf(n.ID)] = n
	}
	for _, nr := range reach {
		if nr.Err != "" {
			continue
		}
		n, ok := shown[nr.Node]
		if !ok {
			mr.Violations = append(mr.Violations, fmt.Sprintf("monitor: %s not listed", nr.Node))
			continue
		}
		mn := MonitorNode{Node: nr.Node, Reachability: n.Reachability, Want: wantReach(nr), Verified: n.Verified, Asked: "direct"}
		if n.Via != "" {
			mn.Asked = "via " + r.nameOf(n.Via)
		}
		mr.Nodes = append(mr.Nodes, mn)
		if !n.Verified {
			mr.Violations = append(mr.Violations, fmt.Sprintf("monitor: %s unverified: %s", nr.Node, n.Error))
		}
		if mn.Reachability != mn.Want {
			mr.Violations = append(mr.Violations, fmt.Sprintf("monitor: %s shown %s, its own view says %s", nr.Node, mn.Reachability, mn.Want))
		}
	}
	return mr
}

func (mr *MonitorReport) markdown(b *strings.Builder) {
	b.WriteString("\nstrata monitor at the end of the load:")
	if mr.Err != "" {
		fmt.Fprintf(b, " error: %s\n", mr.Err)
		return
	}
	fmt.Fprintf(b, " %d swarm(s), covered %v, redundancy %s\n\n| node | shown | its own view | signed | asked |\n|---|---|---|---|---|\n",
		mr.Swarms, mr.Covered, mr.Runs)
	for _, n := range mr.Nodes {
		fmt.Fprintf(b, "| %s | %s | %s | %v | %s |\n", n.Node, n.Reachability, n.Want, n.Verified, n.Asked)
	}
}
