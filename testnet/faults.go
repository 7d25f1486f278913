package testnet

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Spot checks and lying nodes in scenarios: a node's fault spec goes to
// its process as STRATA_FAULT_INJECT (honoured only by a strata binary
// built with -tags faultinject; a release binary refuses to start), its
// verify rate as --verify-rate, and the report scores the eviction of
// the faulty nodes and the cost of checking per entry rate.

// faultEnv is the variable cmd/strata reads in faultinject builds.
const faultEnv = "STRATA_FAULT_INJECT"

var faultModes = []string{"flip", "stale", "negate"}

func validateTrust(field string, n NodeSpec) error {
	if r := n.VerifyRate; r != nil && !(*r >= 0 && *r <= 1) {
		return bad(field+".verify_rate", "%v outside [0, 1]", *r)
	}
	if n.Fault == "" {
		return nil
	}
	mode, every, _ := strings.Cut(n.Fault, ":")
	if k, err := strconv.Atoi(every); err != nil || k <= 0 || !slices.Contains(faultModes, mode) {
		return bad(field+".fault", "%q: want MODE:EVERY with MODE one of %s, such as flip:50", n.Fault, strings.Join(faultModes, ", "))
	}
	return nil
}

// TrustReport is how the swarm dealt with its faulty nodes, and what the
// checks cost.
type TrustReport struct {
	Faulty []FaultyReport `json:"faulty,omitempty"`
	// MismatchedBefore counts outputs that differ from the reference
	// among requests that ended before the last eviction; MismatchedAfter
	// among requests that started after it. Flagged counts requests that
	// ended with the entry's wrong-tokens error (their text was flagged,
	// not delivered as right).
	MismatchedBefore int `json:"mismatched_before"`
	MismatchedAfter  int `json:"mismatched_after"`
	Flagged          int `json:"flagged"`
	// Detection is the first spot check that found different outputs,
	// on any entry (nil: none did).
	Detection *Detection `json:"detection,omitempty"`
	// WrongTokens counts delivered tokens that differ from the oracle's
	// token at the same position, by when they reached the client:
	// before the detection, between it and the last eviction, after it.
	// FlaggedTokens of them were in streams the entry then ended with its
	// wrong-tokens error. TokensCompared is every delivered token.
	WrongTokens    WrongTokens `json:"wrong_tokens"`
	TokensCompared int         `json:"tokens_compared"`
	// Entries are each node's spot checks as its /v1/swarm/verify said at
	// the end of the load; Reported sums their accepted fault reports
	// (NodeFaulted records).
	Entries  []NodeVerify `json:"entries,omitempty"`
	Reported uint64       `json:"reported"`
	// Left names the nodes that some polled committed map placed and a
	// later one did not, with no event to stop them: evictions.
	Left []string `json:"left,omitempty"`
	// ByRate groups the successful requests by their entry's verify
	// rate: the cost of checking, measured in the same run.
	ByRate []RateReport `json:"by_rate,omitempty"`
}

// Detection is the swarm's first spot-check mismatch.
type Detection struct {
	// AtS is its time since the load began; By the entry that found it.
	AtS float64 `json:"at_s"`
	By  string  `json:"by"`
	// FaultySteps are the forward steps of a faulty node's work that
	// every entry's conclusive checks covered: as the checked hop, the
	// session's prefill and each decode step, counted once per session
	// (positions in an older node's log); as the checker, the one cold
	// prefill it ran for the check, from the start of the load up to
	// and including it, in FaultyChecks checks: the verified steps until
	// detection that the goal (expect.max_detection_steps) bounds, since
	// only checks of the liar's work can find it.
	FaultySteps  int `json:"faulty_steps"`
	FaultyChecks int `json:"faulty_checks"`
	// Steps and Checks are the same over every hop's work, honest ones
	// included: what checking cost the whole swarm until the detection.
	Steps  int `json:"steps"`
	Checks int `json:"checks"`
	// Partial: some entry's log could not be read or was cut at its cap,
	// so the step counts are lower bounds.
	Partial bool `json:"partial,omitempty"`
}

// WrongTokens are delivered tokens that differ from the oracle's.
type WrongTokens struct {
	BeforeDetection int `json:"before_detection"`
	BeforeEviction  int `json:"before_eviction"` // after the detection
	AfterEviction   int `json:"after_eviction"`
	Flagged         int `json:"flagged"`
	Requests        int `json:"requests"` // requests with at least one
}

// NodeVerify is one node's spot checks as an entry.
type NodeVerify struct {
	Node         string  `json:"node"`
	Err          string  `json:"error,omitempty"`
	Rate         float64 `json:"rate"`
	Checks       uint64  `json:"checks"`
	Verified     uint64  `json:"verified"`
	Mismatches   uint64  `json:"mismatches"`
	Inconclusive uint64  `json:"inconclusive"`
	Unresolved   uint64  `json:"unresolved"`
	Reported     uint64  `json:"reported"`
	StepsChecked uint64  `json:"steps_checked"`
	// FirstMismatchS is the node's first mismatch since the load began
	// (-1: none).
	FirstMismatchS float64 `json:"first_mismatch_s"`
	log            []checkAt
	logFull        bool
}

// checkAt is one conclusive check of a node's log.
type checkAt struct {
	At        time.Duration // since the load began
	Hop       string        // the checked node's name
	Checker   string        // the name of the holder it was compared with
	Session   string        // the checked session ("": unknown)
	Positions int
	Mismatch  bool
	Steps     int // forward steps covered (0: an older node's log; positions count)
}

// verifyView is the part of /v1/swarm/verify the runner reads.
type verifyView struct {
	Rate                 float64    `json:"rate"`
	Checks               uint64     `json:"checks"`
	Verified             uint64     `json:"verified"`
	Mismatches           uint64     `json:"mismatches"`
	Inconclusive         uint64     `json:"inconclusive"`
	Unresolved           uint64     `json:"unresolved"`
	Reported             uint64     `json:"reported"`
	StepsChecked         uint64     `json:"steps_checked"`
	FirstMismatch        *time.Time `json:"first_mismatch"`
	StepsAtFirstMismatch uint64     `json:"steps_at_first_mismatch"`
	Log                  []struct {
		At        time.Time `json:"at"`
		Hop       string    `json:"hop"`
		Checker   string    `json:"checker"`
		Session   string    `json:"session"`
		Positions int       `json:"positions"`
		Mismatch  bool      `json:"mismatch"`
		Steps     int       `json:"steps"`
	} `json:"log"`
}

// maxNodeCheckLog is the node's cap on its check log (node.maxCheckLog).
const maxNodeCheckLog = 4096

// nodeVerify turns a node's view into its report, times from t0 and
// peers named by nameOf.
func nodeVerify(name string, v verifyView, t0 time.Time, nameOf func(peerID string) string) NodeVerify {
	nv := NodeVerify{Node: name, Rate: v.Rate, Checks: v.Checks, Verified: v.Verified, Mismatches: v.Mismatches,
		Inconclusive: v.Inconclusive, Unresolved: v.Unresolved, Reported: v.Reported, StepsChecked: v.StepsChecked,
		FirstMismatchS: -1, logFull: len(v.Log) >= maxNodeCheckLog}
	if v.FirstMismatch != nil {
		nv.FirstMismatchS = secs(v.FirstMismatch.Sub(t0))
	}
	for _, c := range v.Log {
		nv.log = append(nv.log, checkAt{At: c.At.Sub(t0), Hop: nameOf(c.Hop), Checker: nameOf(c.Checker), Session: c.Session,
			Positions: c.Positions, Mismatch: c.Mismatch, Steps: c.Steps})
	}
	return nv
}

// detection finds the first mismatch over the entries' logs and sums the
// steps every entry checked up to it, and those of faulty nodes' work.
func detection(entries []NodeVerify, faulty []string) *Detection {
	var first *checkAt
	by := ""
	for _, e := range entries {
		for i := range e.log {
			if c := &e.log[i]; c.Mismatch && (first == nil || c.At < first.At) {
				first, by = c, e.Node
			}
		}
	}
	if first == nil {
		return nil
	}
	d := &Detection{AtS: secs(first.At), By: by}
	for _, e := range entries {
		if e.Err != "" {
			d.Partial = true
			continue
		}
		covered := false
		// A check covers a session's positions from its start, so a later
		// check of the same session by the same entry verifies only the
		// positions past the earlier one's: the liar's steps count each
		// position of its work once per session and role.
		seen := map[[2]string]int{}
		for i, c := range e.log {
			if c.At <= first.At {
				n := c.Positions
				if c.Steps > 0 {
					n = c.Steps
				}
				d.Steps += n
				d.Checks++
				// The liar's work is covered whether it was the checked
				// hop or the checker (found then by the third holder).
				role := ""
				switch {
				case slices.Contains(faulty, c.Hop):
					role = "hop"
				case slices.Contains(faulty, c.Checker):
					role = "checker"
				default:
					continue
				}
				d.FaultyChecks++
				if role == "checker" && c.Steps > 0 {
					// A checker runs the session so far as one cold
					// prefill: one forward step of its own, new each time.
					d.FaultySteps++
					continue
				}
				k := [2]string{c.Session, role}
				if c.Session == "" {
					k[0] = fmt.Sprint("#", i) // unknown session: its own
				}
				d.FaultySteps += max(n-seen[k], 0)
				seen[k] = max(seen[k], n)
			} else {
				covered = true
			}
		}
		// A full log that ends before the detection may have lost checks.
		if e.logFull && !covered && e.FirstMismatchS < 0 {
			d.Partial = true
		}
	}
	return d
}

// wrongTokens compares a request's delivered tokens with the oracle's.
func wrongTokens(r *result, ref []int32) {
	r.WrongTokens, r.wrong = 0, make([]bool, len(r.TokenIDs))
	for i, id := range r.TokenIDs {
		if i >= len(ref) || ref[i] != id {
			r.WrongTokens++
			r.wrong[i] = true
		}
	}
}

// FaultyReport is one lying node: EvictedS is when a polled committed map
// first left it out (-1: never).
type FaultyReport struct {
	Node     string  `json:"node"`
	Fault    string  `json:"fault"`
	EvictedS float64 `json:"evicted_s"`
}

// RateReport is the requests whose entries check at Rate ("default":
// the node's default).
type RateReport struct {
	Rate     string    `json:"rate"`
	Entries  []string  `json:"entries"`
	OK       int       `json:"ok"`
	PerToken Quantiles `json:"per_token"`
	// XRate0 is the per-token p50 of the rate-0 entries over this one's
	// (1: no cost; 0 when no entry runs at rate 0).
	XRate0 float64 `json:"x_rate0"`
}

// rateName is the rate n's entry checks at: its own, else the swarm's.
func rateName(sc *Scenario, n NodeSpec) string {
	switch {
	case n.VerifyRate != nil:
		return strconv.FormatFloat(*n.VerifyRate, 'g', -1, 64)
	case sc.VerifyRate != nil:
		return strconv.FormatFloat(*sc.VerifyRate, 'g', -1, 64)
	}
	return "default"
}

func trustReport(sc *Scenario, results []result, samples []sample, events []eventRun, entries []NodeVerify) *TrustReport {
	used := sc.VerifyRate != nil
	for _, n := range sc.Nodes {
		used = used || n.Fault != "" || n.VerifyRate != nil
	}
	if !used {
		return nil
	}
	var faulty []string
	for _, n := range sc.Nodes {
		if n.Fault != "" {
			faulty = append(faulty, n.Name)
		}
	}
	t := &TrustReport{Entries: entries, Detection: detection(entries, faulty), Left: leftMap(samples, events)}
	for _, e := range entries {
		t.Reported += e.Reported
	}
	last := time.Duration(-1)
	for _, n := range sc.Nodes {
		if n.Fault == "" {
			continue
		}
		f := FaultyReport{Node: n.Name, Fault: n.Fault, EvictedS: -1}
		placed := false
		for _, s := range samples {
			has := slices.ContainsFunc(s.Stages, func(st string) bool { return strings.HasPrefix(st, n.Name+"[") })
			if has {
				placed = true
			} else if placed {
				f.EvictedS = secs(s.At)
				last = max(last, s.At)
				break
			}
		}
		if f.EvictedS < 0 {
			last = time.Duration(math.MaxInt64)
		}
		t.Faulty = append(t.Faulty, f)
	}
	detected := time.Duration(math.MaxInt64)
	if t.Detection != nil {
		detected = time.Duration(t.Detection.AtS * float64(time.Second))
	}
	for _, r := range results {
		flagged := !r.OK && strings.Contains(r.Err, "were wrong")
		if flagged {
			t.Flagged++
		}
		t.TokensCompared += len(r.TokenIDs)
		if r.WrongTokens > 0 {
			t.WrongTokens.Requests++
		}
		if flagged {
			t.WrongTokens.Flagged += r.WrongTokens
		}
		if r.WrongTokens > 0 {
			// Which tokens were wrong is known again from the IDs; the
			// report only needs when each came.
			t.WrongTokens.add(r, detected, last)
		}
		if !r.Mismatch {
			continue
		}
		switch {
		case last >= 0 && r.Start > last:
			t.MismatchedAfter++
		case last < 0 || r.End <= last:
			t.MismatchedBefore++
		}
	}
	groups := map[string][]string{}
	for _, n := range sc.Nodes {
		groups[rateName(sc, n)] = append(groups[rateName(sc, n)], n.Name)
	}
	var base float64
	for _, rate := range slices.Sorted(maps.Keys(groups)) {
		rr := RateReport{Rate: rate, Entries: groups[rate]}
		var per []time.Duration
		for _, r := range results {
			if r.OK && slices.Contains(rr.Entries, r.Entry) {
				rr.OK++
				if r.Tokens > 1 {
					per = append(per, r.PerToken)
				}
			}
		}
		slices.Sort(per)
		rr.PerToken = quantiles(per)
		if rate == "0" {
			base = rr.PerToken.P50Ms
		}
		t.ByRate = append(t.ByRate, rr)
	}
	for i := range t.ByRate {
		if p := t.ByRate[i].PerToken.P50Ms; base > 0 && p > 0 {
			t.ByRate[i].XRate0 = math.Round(base/p*1000) / 1000
		}
	}
	return t
}

// add files r's wrong tokens by their arrival: before detected, before
// evicted (the last eviction; negative: none), or after it.
func (w *WrongTokens) add(r result, detected, evicted time.Duration) {
	for i, at := range r.tokenAt {
		if i >= len(r.wrong) || !r.wrong[i] {
			continue
		}
		switch {
		case at < detected:
			w.BeforeDetection++
		case evicted < 0 || at < evicted:
			w.BeforeEviction++
		default:
			w.AfterEviction++
		}
	}
}

// leftMap names the nodes that a polled map placed and a later one left
// out, with no event that stopped them.
func leftMap(samples []sample, events []eventRun) []string {
	stopped := map[string]bool{}
	for _, e := range events {
		stopped[e.Node] = true
	}
	placed := map[string]bool{}
	var left []string
	for _, s := range samples {
		now := map[string]bool{}
		for _, st := range s.Stages {
			name, _, _ := strings.Cut(st, "[")
			now[name] = true
		}
		for name := range placed {
			if !now[name] && !stopped[name] && !slices.Contains(left, name) {
				left = append(left, name)
			}
		}
		for name := range now {
			placed[name] = true
		}
	}
	slices.Sort(left)
	return left
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

func checkTrust(x Expect, rep *Report) []string {
	t := rep.Trust
	if t == nil {
		return nil
	}
	var v []string
	for _, f := range t.Faulty {
		switch {
		case x.Evicted != nil && *x.Evicted && f.EvictedS < 0:
			v = append(v, "faulty node "+f.Node+" was not evicted")
		case x.MaxEviction > 0 && f.EvictedS > x.MaxEviction.Seconds():
			v = append(v, fmt.Sprintf("faulty node %s evicted at %.1fs > %v", f.Node, f.EvictedS, x.MaxEviction))
		}
	}
	if x.MismatchedAfterEviction != nil && t.MismatchedAfter > *x.MismatchedAfterEviction {
		v = append(v, fmt.Sprintf("mismatched after eviction %d > %d", t.MismatchedAfter, *x.MismatchedAfterEviction))
	}
	if x.Evicted != nil && !*x.Evicted {
		if len(t.Left) > 0 {
			v = append(v, "node(s) left the map with no event: "+strings.Join(t.Left, ", "))
		}
		if t.Reported > 0 {
			v = append(v, fmt.Sprintf("%d fault(s) reported (NodeFaulted)", t.Reported))
		}
	}
	if x.MaxMismatches != nil {
		var n uint64
		for _, e := range t.Entries {
			n += e.Mismatches
		}
		if n > uint64(*x.MaxMismatches) {
			v = append(v, fmt.Sprintf("spot-check mismatches %d > %d", n, *x.MaxMismatches))
		}
	}
	d := t.Detection
	if (x.MaxDetectionSteps != nil || x.MaxDetection > 0) && d == nil {
		v = append(v, "no spot check found a mismatch")
	}
	if d != nil && x.MaxDetectionSteps != nil {
		// The goal is about the liar's work; a scenario with no faulty
		// node has no liar figure, so all hops' steps stand in.
		n, of := d.FaultySteps, "of the faulty node's work"
		if len(t.Faulty) == 0 {
			n, of = d.Steps, "over all hops"
		}
		if n > *x.MaxDetectionSteps {
			v = append(v, fmt.Sprintf("detection after %d verified steps %s > %d", n, of, *x.MaxDetectionSteps))
		}
	}
	if d != nil && x.MaxDetection > 0 && d.AtS > x.MaxDetection.Seconds() {
		v = append(v, fmt.Sprintf("detection at %.1fs > %v", d.AtS, x.MaxDetection))
	}
	if x.MaxWrongTokensAfterEviction != nil && t.WrongTokens.AfterEviction > *x.MaxWrongTokensAfterEviction {
		v = append(v, fmt.Sprintf("wrong tokens after eviction %d > %d", t.WrongTokens.AfterEviction, *x.MaxWrongTokensAfterEviction))
	}
	return v
}

func (t *TrustReport) markdown(b *strings.Builder) {
	b.WriteString("\n### Trust\n\n")
	if len(t.Faulty) > 0 {
		b.WriteString("| faulty node | fault | evicted at |\n|---|---|---:|\n")
		for _, f := range t.Faulty {
			fmt.Fprintf(b, "| %s | %s | %s s |\n", f.Node, f.Fault, fmtS(f.EvictedS))
		}
		fmt.Fprintf(b, "\nMismatched outputs before the eviction: %d; after: %d; requests flagged wrong by their entry: %d.\n\n",
			t.MismatchedBefore, t.MismatchedAfter, t.Flagged)
	}
	if d := t.Detection; d != nil {
		partial := ""
		if d.Partial {
			partial = " (a lower bound: some entry's log is missing or cut)"
		}
		fmt.Fprintf(b, "Detection: the first mismatch at %.1f s, found by %s", d.AtS, d.By)
		if len(t.Faulty) > 0 {
			fmt.Fprintf(b, ", after %d verified steps of the faulty node's work (in %d checks of it); all hops: %d steps in %d conclusive checks over all entries%s.\n",
				d.FaultySteps, d.FaultyChecks, d.Steps, d.Checks, partial)
		} else {
			fmt.Fprintf(b, ", after %d verified steps in %d conclusive checks over all entries (all hops)%s.\n", d.Steps, d.Checks, partial)
		}
		for _, f := range t.Faulty {
			if f.EvictedS >= 0 {
				fmt.Fprintf(b, "Eviction of %s: %.1f s (%.1f s after the detection).\n", f.Node, f.EvictedS, f.EvictedS-d.AtS)
			}
		}
		b.WriteString("\n")
	} else {
		b.WriteString("Detection: no spot check found a mismatch.\n\n")
	}
	w := t.WrongTokens
	fmt.Fprintf(b, "Wrong tokens (each delivered token against the oracle's at its position, %d compared): %d before the detection, %d between it and the eviction, %d after; %d of them in streams the entry flagged; %d request(s) with any.\n",
		t.TokensCompared, w.BeforeDetection, w.BeforeEviction, w.AfterEviction, w.Flagged, w.Requests)
	fmt.Fprintf(b, "Faults reported and accepted (NodeFaulted): %d. Nodes that left the map with no event: %s.\n\n", t.Reported, orNone(t.Left))
	if len(t.Entries) > 0 {
		b.WriteString("| entry | rate | checks | verified | mismatches | inconclusive | unresolved | reported | steps checked | first mismatch |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, e := range t.Entries {
			if e.Err != "" {
				fmt.Fprintf(b, "| %s | error: %s | | | | | | | | |\n", e.Node, e.Err)
				continue
			}
			first := "—"
			if e.FirstMismatchS >= 0 {
				first = fmt.Sprintf("%.1f s", e.FirstMismatchS)
			}
			fmt.Fprintf(b, "| %s | %g | %d | %d | %d | %d | %d | %d | %d | %s |\n", e.Node, e.Rate, e.Checks, e.Verified, e.Mismatches,
				e.Inconclusive, e.Unresolved, e.Reported, e.StepsChecked, first)
		}
		b.WriteString("\n")
	}
	b.WriteString("| verify rate | entries | ok | per-token p50 | per-token p99 | speed vs rate 0 |\n|---|---|---:|---:|---:|---:|\n")
	for _, r := range t.ByRate {
		x := "—"
		if r.XRate0 > 0 {
			x = fmt.Sprintf("%.2f×", r.XRate0)
		}
		fmt.Fprintf(b, "| %s | %s | %d | %.1f ms | %.1f ms | %s |\n", r.Rate, strings.Join(r.Entries, " "), r.OK,
			r.PerToken.P50Ms, r.PerToken.P99Ms, x)
	}
}
