package testnet

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// The nemesis: faults drawn from a seeded generator, one at a time, each
// held for a while and then undone, under the scenario's load, in the
// spirit of Jepsen's tests of etcd. NemesisEvents turns the spec into
// ordinary events (the schedule, which the report lists), so that the
// same seed and nodes always give the same schedule; the nodes a fault
// hits at run time (the leader, a hop) depend on the swarm of the moment
// and are recorded with each event.

// Fault kinds.
const (
	FaultPartitionMajority = "partition_majority" // the nodes split into a majority and a minority
	FaultPartitionBridge   = "partition_bridge"   // two sides that only one bridge node links
	FaultPauseLeader       = "pause_leader"       // SIGSTOP the Raft leader, then SIGCONT
	FaultPauseHop          = "pause_hop"          // SIGSTOP a stage holder that does not lead
	FaultLoss              = "loss"               // drop a share of one node's packets
	FaultDelay             = "delay"              // delay one node's packets
	FaultKill              = "kill"               // kill -9 a node, then rejoin it
	FaultKillLeader        = "kill_leader"        // kill -9 the leader, then rejoin it
)

// FaultKinds lists every kind, in the order the report gives them.
var FaultKinds = []string{FaultPartitionMajority, FaultPartitionBridge, FaultPauseLeader, FaultPauseHop,
	FaultLoss, FaultDelay, FaultKill, FaultKillLeader}

// NemesisSpec is a scenario's nemesis section.
type NemesisSpec struct {
	// Seed makes the schedule repeatable.
	Seed uint64 `yaml:"seed"`
	// Start is the first fault, from the start of the load (20s: joiners
	// become Raft voters only after 10 s of stable membership).
	Start time.Duration `yaml:"start"`
	// Each fault is held for a time drawn from [HoldMin, HoldMax] (3s,
	// 8s), then undone, and the next comes after a quiet gap drawn from
	// [GapMin, GapMax] (4s, 8s) in which the swarm recovers.
	HoldMin time.Duration `yaml:"hold_min"`
	HoldMax time.Duration `yaml:"hold_max"`
	GapMin  time.Duration `yaml:"gap_min"`
	GapMax  time.Duration `yaml:"gap_max"`
	// Kinds weighs the fault kinds (none: all, equally). Partitions,
	// loss and delay need network.mode namespaces.
	Kinds map[string]float64 `yaml:"kinds"`
	// Loss is the share of a lossy node's packets dropped (0.3); Delay
	// the extra one-way delay of a slow node's packets (300ms).
	Loss  float64       `yaml:"loss"`
	Delay time.Duration `yaml:"delay"`
}

func (n *NemesisSpec) defaults() {
	if n.Start == 0 {
		n.Start = 20 * time.Second
	}
	if n.HoldMin == 0 {
		n.HoldMin = 3 * time.Second
	}
	if n.HoldMax == 0 {
		n.HoldMax = max(8*time.Second, n.HoldMin)
	}
	if n.GapMin == 0 {
		n.GapMin = 4 * time.Second
	}
	if n.GapMax == 0 {
		n.GapMax = max(8*time.Second, n.GapMin)
	}
	if len(n.Kinds) == 0 {
		n.Kinds = map[string]float64{}
		for _, k := range FaultKinds {
			n.Kinds[k] = 1
		}
	}
	if n.Loss == 0 {
		n.Loss = 0.3
	}
	if n.Delay == 0 {
		n.Delay = 300 * time.Millisecond
	}
}

func (n *NemesisSpec) validate(mode string) error {
	switch {
	case n.Start < 0 || n.HoldMin <= 0 || n.GapMin <= 0:
		return bad("nemesis", "start must be >= 0, hold_min and gap_min positive")
	case n.HoldMax < n.HoldMin || n.GapMax < n.GapMin:
		return bad("nemesis", "hold_max >= hold_min and gap_max >= gap_min")
	case n.Loss <= 0 || n.Loss >= 1:
		return bad("nemesis.loss", "%v outside (0, 1)", n.Loss)
	case n.Delay <= 0:
		return bad("nemesis.delay", "must be positive")
	}
	total := 0.0
	for k, w := range n.Kinds {
		if !slices.Contains(FaultKinds, k) {
			return bad("nemesis.kinds", "%q is not one of %s", k, strings.Join(FaultKinds, ", "))
		}
		if w < 0 {
			return bad("nemesis.kinds."+k, "negative weight")
		}
		if w > 0 && mode != ModeNamespaces && (strings.HasPrefix(k, "partition") || k == FaultLoss || k == FaultDelay) {
			return bad("nemesis.kinds."+k, "needs network.mode %s", ModeNamespaces)
		}
		total += w
	}
	if total <= 0 {
		return bad("nemesis.kinds", "no kind has a positive weight")
	}
	return nil
}

// NemesisEvents draws the schedule: from Start until the end of the
// load (leaving a last gap to recover in), one fault at a time, each an
// event that starts it and one that undoes it. nodes are the nodes that
// start with the swarm, in scenario order.
func NemesisEvents(n NemesisSpec, nodes []string, duration time.Duration) []EventSpec {
	rng := rand.New(rand.NewPCG(n.Seed, 0x6e656d65))
	kinds := slices.Sorted(maps.Keys(n.Kinds)) // map order is random: sort for a repeatable draw
	total := 0.0
	for _, k := range kinds {
		total += n.Kinds[k]
	}
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		// Whole 100 ms steps: a readable schedule.
		steps := int64((hi - lo) / (100 * time.Millisecond))
		return lo + time.Duration(rng.Int64N(steps+1))*100*time.Millisecond
	}
	var out []EventSpec
	for t := n.Start; ; {
		x, kind := rng.Float64()*total, kinds[len(kinds)-1]
		for _, k := range kinds {
			if x < n.Kinds[k] {
				kind = k
				break
			}
			x -= n.Kinds[k]
		}
		hold := between(n.HoldMin, n.HoldMax)
		gap := between(n.GapMin, n.GapMax)
		if t+hold+n.GapMin > duration {
			break
		}
		shuffled := slices.Clone(nodes)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		on := EventSpec{At: t, Fault: kind}
		off := EventSpec{At: t + hold, Fault: kind}
		switch kind {
		case FaultPartitionMajority:
			minority := len(shuffled) / 2
			if len(shuffled)%2 == 0 {
				minority-- // 4 nodes: 3 and 1, so that one side keeps a quorum
			}
			minority = max(minority, 1)
			on.Action, on.Groups = ActPartition, [][]string{shuffled[minority:], shuffled[:minority]}
			off.Action = ActHeal
		case FaultPartitionBridge:
			// The bridge is in no group: it keeps its links to both sides.
			rest := shuffled[1:]
			half := (len(rest) + 1) / 2
			on.Action, on.Groups = ActPartition, [][]string{rest[:half], rest[half:]}
			off.Action = ActHeal
		case FaultPauseLeader, FaultPauseHop:
			on.Action, on.Pick = ActPause, PickLeader
			if kind == FaultPauseHop {
				on.Pick = PickHop
			}
			off.Action = ActResume
		case FaultLoss:
			on.Action, on.Node, on.Loss = ActDegrade, shuffled[0], n.Loss
			off.Action, off.Node = ActRestore, shuffled[0]
		case FaultDelay:
			on.Action, on.Node, on.Delay = ActDegrade, shuffled[0], n.Delay
			off.Action, off.Node = ActRestore, shuffled[0]
		case FaultKill:
			on.Action, on.Node = ActKill, shuffled[0]
			off.Action = ActRejoin
		case FaultKillLeader:
			on.Action = ActKillLeader
			off.Action = ActRejoin
		}
		out = append(out, on, off)
		t += hold + gap
	}
	return out
}

// faultEnd reports whether an action undoes a fault.
func faultEnd(action string) bool {
	switch action {
	case ActHeal, ActResume, ActRestore, ActRejoin:
		return true
	}
	return false
}

// NemesisReport is the nemesis section of a report.
type NemesisReport struct {
	Seed   uint64         `json:"seed"`
	Faults int            `json:"faults"`
	ByKind map[string]int `json:"by_kind"`
	// Recovery after each fault was undone: from the undoing event until
	// a polled map is healthy and a request sent after it succeeded.
	// Unrecovered counts faults whose swarm had not recovered by the next
	// fault (or the end).
	RecoveryP50S float64 `json:"recovery_p50_s"`
	RecoveryMaxS float64 `json:"recovery_max_s"`
	Unrecovered  int     `json:"unrecovered"`
	// During counts faults during which the swarm routed around the
	// fault: a healthy map and a request that started after the fault
	// began and succeeded before it was undone.
	During int `json:"served_during"`
	// Skipped counts faults not carried out because their target did not
	// exist (no leader known for 5 s).
	Skipped int `json:"skipped"`
	// LeaderlessMaxS is the longest stretch in which the polled node
	// knew no leader, and LeaderlessS all such stretches together.
	LeaderlessMaxS float64         `json:"leaderless_max_s"`
	LeaderlessS    float64         `json:"leaderless_s"`
	History        *HistoryVerdict `json:"history,omitempty"`
	// Requests is the request checker's verdict.
	Requests RequestVerdict `json:"requests"`
}

// leaderless sums the stretches of polls that knew no leader, each from
// its first such poll until the next poll that knew one (or the last).
func leaderless(samples []sample) (total, longest time.Duration) {
	var from time.Duration = -1
	for i, s := range samples {
		end := s.Leader != "" || i == len(samples)-1
		if s.Leader == "" && from < 0 {
			from = s.At
		}
		if end && from >= 0 {
			d := s.At - from
			total += d
			longest = max(longest, d)
			from = -1
		}
	}
	return total, longest
}

// nemesisReport counts the faults and their recoveries from the report's
// events (which buildReport made from the same events, in order).
func nemesisReport(n *NemesisSpec, evs []eventRun, rep *Report) *NemesisReport {
	nr := &NemesisReport{Seed: n.Seed, ByKind: map[string]int{}}
	var recs []time.Duration
	for i, e := range evs {
		if e.Fault == "" || i >= len(rep.Events) {
			continue
		}
		er := rep.Events[i]
		if e.Skipped != "" {
			if !faultEnd(e.Action) {
				nr.Skipped++
			}
			continue
		}
		if !faultEnd(e.Action) {
			nr.Faults++
			nr.ByKind[e.Fault]++
			if er.Recovered {
				nr.During++
			}
			continue
		}
		if er.Recovered {
			recs = append(recs, time.Duration(er.RecoveryS*float64(time.Second)))
		} else {
			nr.Unrecovered++
		}
	}
	if len(recs) > 0 {
		nr.RecoveryP50S = secs(percentile(recs, 50))
		nr.RecoveryMaxS = secs(percentile(recs, 100))
	}
	return nr
}

func (nr *NemesisReport) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n### Nemesis (seed %d)\n\n%d faults carried out (%d skipped: no leader known):", nr.Seed, nr.Faults, nr.Skipped)
	for _, k := range FaultKinds {
		if c := nr.ByKind[k]; c > 0 {
			fmt.Fprintf(b, " %s %d,", k, c)
		}
	}
	s := b.String()
	if strings.HasSuffix(s, ",") {
		b.Reset()
		b.WriteString(strings.TrimSuffix(s, ","))
	}
	fmt.Fprintf(b, ". The swarm served through %d of them (a healthy map and a request started during the fault answered before it ended). "+
		"Recovery after a fault was undone: p50 %.1f s, max %.1f s; %d did not recover before the next fault.\n\n",
		nr.During, nr.RecoveryP50S, nr.RecoveryMaxS, nr.Unrecovered)
	fmt.Fprintf(b, "The polled node knew no leader for %.1f s in all, %.1f s at the longest.\n\n", nr.LeaderlessS, nr.LeaderlessMaxS)
	if h := nr.History; h != nil {
		verdict := "LINEARIZABLE"
		if !h.Linearizable {
			verdict = "NOT LINEARIZABLE"
		}
		fmt.Fprintf(b, "Committed maps: %s (Porcupine: %s). %d distinct maps (epochs %v), %d process lives, %d applies, %d snapshot restores, %d polled reads.\n",
			verdict, h.Porcupine, h.Maps, h.Epochs, h.Lives, h.Applies, h.Restores, h.Reads)
		for _, v := range h.Violations {
			fmt.Fprintf(b, "- %s\n", v)
		}
		b.WriteString("\n")
	}
	q := nr.Requests
	fmt.Fprintf(b, "Requests: %d exact, %d wrong, %d duplicated, %d lost; %d failed with an error (%d during a fault, %d outside any: %v).\n",
		q.Exact, q.Wrong, q.Duplicated, q.Lost, q.Failed, q.FailedInFault, q.FailedOutside, q.OutsideIDs)
	for _, e := range q.Examples {
		fmt.Fprintf(b, "- %s\n", e)
	}
}

// RequestVerdict classifies every request against the single-process
// answer: exact; wrong (a delivered token differs); duplicated (the
// stream repeated positions: the reference is a proper subsequence of
// what came); lost (positions missing: what came is a proper subsequence
// of the reference, yet the stream said it was done). A failed request
// must have delivered a prefix of the reference before its error, and
// have overlapped a fault (from its start until the swarm recovered
// after it was undone).
type RequestVerdict struct {
	Exact         int      `json:"exact"`
	Wrong         int      `json:"wrong"`
	Duplicated    int      `json:"duplicated"`
	Lost          int      `json:"lost"`
	Failed        int      `json:"failed"`
	FailedInFault int      `json:"failed_in_fault"`
	FailedOutside int      `json:"failed_outside"`
	OutsideIDs    []int    `json:"failed_outside_ids,omitempty"`
	Examples      []string `json:"examples,omitempty"`
	OK            bool     `json:"ok"`
}

// window is a span in which requests may fail: a fault and its recovery.
type window struct{ from, to time.Duration }

// faultWindows are the spans from each fault's start until the swarm
// recovered after it was undone (or the next fault, or the end).
func faultWindows(evs []eventRun, rep *Report, end time.Duration) []window {
	var out []window
	for i, e := range evs {
		if e.Fault == "" || faultEnd(e.Action) || e.Skipped != "" {
			continue
		}
		w := window{from: e.At, to: end}
		for j := i + 1; j < len(evs); j++ {
			if faultEnd(evs[j].Action) && evs[j].Fault == e.Fault {
				if j < len(rep.Events) && rep.Events[j].Recovered {
					w.to = evs[j].At + time.Duration(rep.Events[j].RecoveryS*float64(time.Second))
				} else if j+1 < len(evs) {
					w.to = evs[j+1].At
				}
				break
			}
		}
		out = append(out, w)
	}
	return out
}

// subsequence reports whether a is a subsequence of b.
func subsequence(a, b []int32) bool {
	i := 0
	for _, x := range b {
		if i < len(a) && a[i] == x {
			i++
		}
	}
	return i == len(a)
}

// checkRequests classifies the results; refs are the reference answers
// by prompt. end is the end of the load.
func checkRequests(results []result, refs []RefAnswer, wins []window) RequestVerdict {
	var v RequestVerdict
	example := func(format string, args ...any) {
		if len(v.Examples) < 10 {
			v.Examples = append(v.Examples, fmt.Sprintf(format, args...))
		}
	}
	for _, r := range results {
		ref := refs[r.Prompt]
		want := ref.Tokens
		got := r.TokenIDs
		if !r.OK {
			v.Failed++
			// Before its error it may have streamed part of the answer:
			// that part must be right.
			if len(got) > 0 && !(len(got) <= len(want) && slices.Equal(got, want[:len(got)])) {
				v.Wrong++
				example("request %d (failed: %s) streamed %d tokens that are not a prefix of the reference's before its error", r.ID, r.Err, len(got))
			}
			in := false
			for _, w := range wins {
				if r.Start <= w.to && r.End >= w.from {
					in = true
					break
				}
			}
			if in {
				v.FailedInFault++
			} else {
				v.FailedOutside++
				v.OutsideIDs = append(v.OutsideIDs, r.ID)
				example("request %d failed outside any fault (%.1f–%.1f s): %s", r.ID, r.Start.Seconds(), r.End.Seconds(), r.Err)
			}
			continue
		}
		switch {
		case slices.Equal(got, want) && r.Text == ref.Text:
			v.Exact++
		case len(got) > len(want) && subsequence(want, got):
			v.Duplicated++
			example("request %d: %d tokens streamed for the reference's %d: positions repeated", r.ID, len(got), len(want))
		case len(got) < len(want) && subsequence(got, want):
			v.Lost++
			example("request %d: %d tokens streamed for the reference's %d: positions missing", r.ID, len(got), len(want))
		default:
			v.Wrong++
			example("request %d: answer differs from the single-process engine's", r.ID)
		}
	}
	v.OK = v.Wrong == 0 && v.Duplicated == 0 && v.Lost == 0 && v.FailedOutside == 0
	return v
}

// checkNemesis lists how the report misses Expect's linearizable and
// clean_requests.
func checkNemesis(x Expect, rep *Report) []string {
	var v []string
	if x.Linearizable != nil && *x.Linearizable {
		switch h := rep.History; {
		case h == nil:
			v = append(v, "no committed-map history to check: "+rep.HistoryErr)
		case !h.Linearizable:
			why := "porcupine " + h.Porcupine
			if len(h.Violations) > 0 {
				why = h.Violations[0]
			}
			v = append(v, "committed maps not linearizable: "+why)
		}
	}
	if x.CleanRequests != nil && *x.CleanRequests {
		if rep.Nemesis == nil {
			v = append(v, "clean_requests needs a nemesis section")
		} else if q := rep.Nemesis.Requests; !q.OK {
			v = append(v, fmt.Sprintf("requests: %d wrong, %d duplicated, %d lost, %d failed outside any fault",
				q.Wrong, q.Duplicated, q.Lost, q.FailedOutside))
		}
	}
	return v
}
