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
	// ByRate groups the successful requests by their entry's verify
	// rate: the cost of checking, measured in the same run.
	ByRate []RateReport `json:"by_rate,omitempty"`
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

func rateName(n NodeSpec) string {
	if n.VerifyRate == nil {
		return "default"
	}
	return strconv.FormatFloat(*n.VerifyRate, 'g', -1, 64)
}

func trustReport(sc *Scenario, results []result, samples []sample) *TrustReport {
	used := false
	for _, n := range sc.Nodes {
		used = used || n.Fault != "" || n.VerifyRate != nil
	}
	if !used {
		return nil
	}
	t := &TrustReport{}
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
	for _, r := range results {
		if !r.OK && strings.Contains(r.Err, "were wrong") {
			t.Flagged++
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
		groups[rateName(n)] = append(groups[rateName(n)], n.Name)
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
