package testnet

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Report is the outcome of one scenario run. Times are seconds (or
// milliseconds where named) since the load began.
type Report struct {
	Scenario string  `json:"scenario"`
	Network  string  `json:"network"`
	RunDir   string  `json:"run_dir"`
	Nodes    int     `json:"nodes"`
	LoadS    float64 `json:"load_s"` // from the start of the load to its last request's end
	// Capacity: what the swarm served before the timed load, when the
	// scenario measures it (load.capacity), and the rates then offered.
	Capacity *CapacityReport `json:"capacity,omitempty"`

	Requests     int `json:"requests"`
	OK           int `json:"ok"`
	Failed       int `json:"failed"`
	EntryRetried int `json:"entry_retried"`
	// Retried requests succeeded after the client tried again following
	// a 503/429 or a refused connection before any output; Retries counts
	// every such retry, also those of requests that failed in the end,
	// and RetryErrors what made them.
	Retried     int            `json:"retried"`
	Retries     int            `json:"retries"`
	RetryErrors map[string]int `json:"retry_errors,omitempty"`
	Mismatched  int            `json:"mismatched"`

	TTFT     Quantiles `json:"ttft"`
	PerToken Quantiles `json:"per_token"`
	// QueueWait is the wait for admission in the entries' queues, over
	// answered requests; Entries splits the requests by their entry.
	QueueWait Quantiles     `json:"queue_wait"`
	Entries   []EntryReport `json:"entries"`
	// GoodputTokensPerS is the tokens of successful requests per second
	// of load.
	GoodputTokensPerS float64 `json:"goodput_tokens_per_s"`
	// Stolen is how many requests a thief entry took from another's
	// queue and drove (work stealing), summed over the nodes.
	Stolen int `json:"stolen"`

	Throughput []Bucket      `json:"throughput"`
	Events     []EventReport `json:"events"`
	Epochs     []EpochReport `json:"epochs"`
	Crashed    []string      `json:"crashed,omitempty"` // nodes that exited on their own
	// Reachability is each running node's diagnosis at the end of the
	// load: AutoNAT's verdict, its relays, and how it links to each peer.
	Reachability []NodeReach `json:"reachability,omitempty"`
	// Joins are a public swarm's joins by name (public.go).
	Joins []JoinReport `json:"joins,omitempty"`
	// Monitor is strata monitor's view at the end of the load, checked
	// (scenarios with monitor: true).
	Monitor *MonitorReport `json:"monitor,omitempty"`
	Errors  map[string]int `json:"errors,omitempty"` // failed requests' errors, counted

	Pass       bool     `json:"pass"`
	Violations []string `json:"violations,omitempty"`

	// Trust is the spot-check outcome (faults.go); nil when no node of
	// the scenario lies or sets a verify rate.
	Trust *TrustReport `json:"trust,omitempty"`

	// History is the committed-map history checker's verdict (nil when
	// it could not run: HistoryErr says why); Nemesis the nemesis
	// section.
	History    *HistoryVerdict `json:"history,omitempty"`
	HistoryErr string          `json:"history_error,omitempty"`
	Nemesis    *NemesisReport  `json:"nemesis,omitempty"`

	Results []result `json:"results"`
}

// Quantiles of a latency over successful requests, in milliseconds.
type Quantiles struct {
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	N     int     `json:"n"`
}

// EntryReport is one entry node's share of the requests (by the entry of
// their last attempt).
type EntryReport struct {
	Entry     string    `json:"entry"`
	Requests  int       `json:"requests"`
	OK        int       `json:"ok"`
	Failed    int       `json:"failed"`
	Tokens    int       `json:"tokens"`
	QueueWait Quantiles `json:"queue_wait"`
	TTFT      Quantiles `json:"ttft"`
}

// Bucket is the work finished in [FromS, ToS): requests that ended in it
// and their tokens.
type Bucket struct {
	FromS      float64 `json:"from_s"`
	ToS        float64 `json:"to_s"`
	Requests   int     `json:"requests"`
	Failed     int     `json:"failed"`
	Tokens     int     `json:"tokens"`
	TokensPerS float64 `json:"tokens_per_s"`
}

// EventReport is one event and the swarm's recovery from it.
//
// Recovery is the time from the event until both (a) a polled committed
// map covers every layer with stages on nodes the runner has not stopped
// (MapS), and (b) a request sent at or after the event has succeeded
// (RequestS): RecoveryS = max(MapS, RequestS) - AtS. Both must happen
// before the next event (or, for the last, by the end of the run);
// otherwise the event did not recover.
type EventReport struct {
	AtS     float64 `json:"at_s"`
	Action  string  `json:"action"`
	Node    string  `json:"node,omitempty"`
	Fault   string  `json:"fault,omitempty"` // the nemesis fault it starts or undoes
	Skipped string  `json:"skipped,omitempty"`
	Err     string  `json:"error,omitempty"`
	ExitedS float64 `json:"exited_s,omitempty"` // leave: when the process exited
	MapS    float64 `json:"map_s"`
	// RepairedS (kill, leave, kill_leader): when a polled committed map
	// first left the stopped node out (-1: not before the next event).
	RepairedS float64 `json:"repaired_s"`
	RequestS  float64 `json:"request_s"`
	Recovered bool    `json:"recovered"`
	RecoveryS float64 `json:"recovery_s"`
	// ServeS (join, rejoin): from the event until a polled committed map
	// places the node (-1: not before the next event). For a node that
	// fetches its layers (Fetch) it includes the fetch over its link
	// (Rate: its rate limit, "" for none).
	ServeS float64 `json:"serve_s"`
	Fetch  bool    `json:"fetch,omitempty"`
	Rate   string  `json:"rate,omitempty"`
}

// EpochReport is a change of the committed map or leader as polled.
type EpochReport struct {
	AtS     float64  `json:"at_s"`
	Epoch   uint64   `json:"epoch"`
	Leader  string   `json:"leader"`
	Covers  bool     `json:"covers"`
	Healthy bool     `json:"healthy"`
	Stages  []string `json:"stages"`
}

func secs(d time.Duration) float64 { return math.Round(d.Seconds()*1000) / 1000 }
func msOf(d time.Duration) float64 { return math.Round(float64(d.Microseconds())) / 1000 }

func sortDurations(xs []time.Duration) { slices.Sort(xs) }

func quantiles(xs []time.Duration) Quantiles {
	return Quantiles{P50Ms: msOf(percentile(xs, 50)), P99Ms: msOf(percentile(xs, 99)), N: len(xs)}
}

// bucketWidth splits a run into about a dozen whole-second buckets.
func bucketWidth(total time.Duration) time.Duration {
	return max(time.Second, (total / 12).Round(time.Second))
}

// recovery finds when the swarm recovered from an event at at whose
// action took effect at done, looking no further than until: a map
// polled between at and done still shows the node the event stops.
func recovery(at, done, until time.Duration, samples []sample, results []result) (mapAt, reqAt time.Duration, ok bool) {
	mapAt, reqAt = -1, -1
	for _, s := range samples {
		if s.At >= max(at, done) && s.At < until && s.Healthy {
			mapAt = s.At
			break
		}
	}
	for _, r := range results {
		if r.OK && r.Start >= at && r.End < until && (reqAt < 0 || r.End < reqAt) {
			reqAt = r.End
		}
	}
	return mapAt, reqAt, mapAt >= 0 && reqAt >= 0
}

// buildReport scores a run; refs holds each prompt's reference text.
func buildReport(sc *Scenario, results []result, refs []RefAnswer, events []eventRun, samples []sample,
	loadEnd time.Duration, crashed []string, verify []NodeVerify) *Report {
	rep := &Report{Scenario: sc.Name, Nodes: len(sc.Nodes), LoadS: secs(loadEnd), Crashed: crashed, Requests: len(results)}
	slices.SortFunc(results, func(a, b result) int { return a.ID - b.ID })
	var ttft, perTok, waits []time.Duration
	type entryAcc struct {
		rep         EntryReport
		waits, ttft []time.Duration
	}
	byEntry := map[string]*entryAcc{}
	tokens := 0
	for i := range results {
		r := &results[i]
		acc := byEntry[r.Entry]
		if acc == nil {
			acc = &entryAcc{rep: EntryReport{Entry: r.Entry}}
			byEntry[r.Entry] = acc
		}
		acc.rep.Requests++
		if r.OK {
			acc.rep.OK++
			acc.rep.Tokens += r.Tokens
			acc.waits = append(acc.waits, r.QueueWait)
			acc.ttft = append(acc.ttft, r.TTFT)
			waits = append(waits, r.QueueWait)
			tokens += r.Tokens
		} else {
			acc.rep.Failed++
		}
		if r.Retried {
			rep.EntryRetried++
		}
		wrongTokens(r, refs[r.Prompt].Tokens)
		rep.Retries += r.Retries
		for _, e := range r.RetryErrs {
			if rep.RetryErrors == nil {
				rep.RetryErrors = map[string]int{}
			}
			rep.RetryErrors[e]++
		}
		if r.OK && r.Retries > 0 {
			rep.Retried++
		}
		if !r.OK {
			rep.Failed++
			if rep.Errors == nil {
				rep.Errors = map[string]int{}
			}
			rep.Errors[r.Err]++
			continue
		}
		rep.OK++
		if r.Text != refs[r.Prompt].Text {
			r.Mismatch = true
			rep.Mismatched++
		}
		ttft = append(ttft, r.TTFT)
		if r.Tokens > 1 {
			perTok = append(perTok, r.PerToken)
		}
	}
	rep.TTFT, rep.PerToken = quantiles(ttft), quantiles(perTok)
	rep.QueueWait = quantiles(waits)
	for _, name := range slices.Sorted(maps.Keys(byEntry)) {
		acc := byEntry[name]
		acc.rep.QueueWait, acc.rep.TTFT = quantiles(acc.waits), quantiles(acc.ttft)
		rep.Entries = append(rep.Entries, acc.rep)
	}
	if loadEnd > 0 {
		rep.GoodputTokensPerS = math.Round(float64(tokens)/loadEnd.Seconds()*10) / 10
	}
	rep.Results = results

	w := bucketWidth(loadEnd)
	for from := time.Duration(0); from < loadEnd; from += w {
		to := min(from+w, loadEnd)
		b := Bucket{FromS: secs(from), ToS: secs(to)}
		for _, r := range results {
			if r.End >= from && (r.End < to || (to == loadEnd && r.End == to)) {
				if r.OK {
					b.Requests++
					b.Tokens += r.Tokens
				} else {
					b.Failed++
				}
			}
		}
		if d := (to - from).Seconds(); d > 0 {
			b.TokensPerS = math.Round(float64(b.Tokens)/d*10) / 10
		}
		rep.Throughput = append(rep.Throughput, b)
	}

	for i, e := range events {
		until := time.Duration(math.MaxInt64)
		if i+1 < len(events) {
			until = events[i+1].At
		}
		er := EventReport{AtS: secs(e.At), Action: e.Action, Node: e.Node, Fault: e.Fault, Err: e.Err, Skipped: e.Skipped,
			MapS: -1, RequestS: -1, RecoveryS: -1, RepairedS: -1}
		if e.Action == ActPartition && e.Node == "" {
			var sides []string
			for _, g := range e.Groups {
				sides = append(sides, strings.Join(g, " "))
			}
			er.Node = strings.Join(sides, " | ")
		}
		if e.Action == ActKill || e.Action == ActLeave || e.Action == ActKillLeader {
			for _, s := range samples {
				if s.At >= e.At && s.At < until && !slices.ContainsFunc(s.Stages, func(st string) bool { return strings.HasPrefix(st, e.Node+"[") }) {
					er.RepairedS = secs(s.At)
					break
				}
			}
		}
		if e.Exited > 0 {
			er.ExitedS = secs(e.Exited)
		}
		er.ServeS = -1
		if e.Action == ActJoin || e.Action == ActRejoin {
			for _, n := range sc.Nodes {
				if n.Name == e.Node {
					er.Fetch, er.Rate = n.Fetch, n.Rate
				}
			}
			for _, s := range samples {
				if s.At >= e.At && s.At < until && slices.ContainsFunc(s.Stages, func(st string) bool { return strings.HasPrefix(st, e.Node+"[") }) {
					er.ServeS = secs(s.At - e.At)
					break
				}
			}
		}
		if e.Err == "" && e.Skipped == "" {
			mapAt, reqAt, ok := recovery(e.At, e.Done, until, samples, results)
			if mapAt >= 0 {
				er.MapS = secs(mapAt)
			}
			if reqAt >= 0 {
				er.RequestS = secs(reqAt)
			}
			if ok {
				er.Recovered, er.RecoveryS = true, secs(max(mapAt, reqAt)-e.At)
			}
		}
		rep.Events = append(rep.Events, er)
	}

	var prev *sample
	for i := range samples {
		s := &samples[i]
		if prev == nil || s.Epoch != prev.Epoch || s.Leader != prev.Leader || s.Healthy != prev.Healthy {
			rep.Epochs = append(rep.Epochs, EpochReport{AtS: secs(s.At), Epoch: s.Epoch, Leader: s.Leader, Covers: s.Covers,
				Healthy: s.Healthy, Stages: s.Stages})
		}
		prev = s
	}
	rep.Trust = trustReport(sc, results, samples, events, verify)
	rep.Violations = append(check(sc, rep), checkTrust(sc.Expect, rep)...)
	rep.Pass = len(rep.Violations) == 0
	return rep
}

// check lists how the report misses the scenario's expectations. Nodes
// that exit on their own, and events that could not be carried out, are
// always violations.
func check(sc *Scenario, rep *Report) []string {
	x := sc.Expect
	var v []string
	if x.MaxWaitRatio > 0 {
		hot, others := -1.0, 0.0
		for _, e := range rep.Entries {
			p99 := max(e.QueueWait.P99Ms, msOf(x.MinWait))
			if e.Entry == sc.Load.Hot {
				hot = e.QueueWait.P99Ms
			} else {
				others = max(others, p99)
			}
		}
		if hot >= 0 && others > 0 && hot > x.MaxWaitRatio*others {
			v = append(v, fmt.Sprintf("hot entry %s queue wait p99 %.0f ms > %.1f × the others' %.0f ms",
				sc.Load.Hot, hot, x.MaxWaitRatio, others))
		}
	}
	if x.Failed != nil && rep.Failed > *x.Failed {
		v = append(v, fmt.Sprintf("failed %d > %d", rep.Failed, *x.Failed))
	}
	if x.Mismatched != nil && rep.Mismatched > *x.Mismatched {
		v = append(v, fmt.Sprintf("mismatched %d > %d", rep.Mismatched, *x.Mismatched))
	}
	if x.MinOK != nil && rep.OK < *x.MinOK {
		v = append(v, fmt.Sprintf("ok %d < %d", rep.OK, *x.MinOK))
	}
	for _, e := range rep.Events {
		name := fmt.Sprintf("%s %s at %.1fs", e.Action, e.Node, e.AtS)
		switch {
		case e.Skipped != "":
		case e.Err != "":
			v = append(v, fmt.Sprintf("%s could not be carried out: %s", name, e.Err))
		case x.Recovered != nil && *x.Recovered && !e.Recovered:
			v = append(v, name+" did not recover")
		case x.MaxRecovery > 0 && e.Recovered && e.RecoveryS > x.MaxRecovery.Seconds():
			v = append(v, fmt.Sprintf("%s recovered in %.1fs > %v", name, e.RecoveryS, x.MaxRecovery))
		}
	}
	for _, c := range rep.Crashed {
		v = append(v, "node "+c+" exited on its own")
	}
	return v
}

func fmtS(s float64) string {
	if s < 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f", s)
}

// Markdown renders the report's tables.
func (rep *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Scenario %s (%s, %d nodes, %.1f s of load)\n\n", rep.Scenario, rep.Network, rep.Nodes, rep.LoadS)
	b.WriteString("| requests | ok | failed | entry retried | retried ok (retries) | mismatched | TTFT p50 | TTFT p99 | per-token p50 | per-token p99 |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| %d | %d | %d | %d | %d (%d) | %d | %.0f ms | %.0f ms | %.1f ms | %.1f ms |\n\n",
		rep.Requests, rep.OK, rep.Failed, rep.EntryRetried, rep.Retried, rep.Retries, rep.Mismatched,
		rep.TTFT.P50Ms, rep.TTFT.P99Ms, rep.PerToken.P50Ms, rep.PerToken.P99Ms)
	if c := rep.Capacity; c != nil {
		fmt.Fprintf(&b, "Capacity, measured before the load: %.1f requests/s (%d requests, %d failed, %d differing from the reference); offered per phase: %.1f requests/s.\n\n",
			c.RPS, c.Requests, c.Failed, c.Mismatched, c.Offered)
	}
	if len(rep.Entries) > 1 || rep.QueueWait.P99Ms > 0 {
		fmt.Fprintf(&b, "Goodput %.1f tokens/s; %d request(s) stolen. Queue wait (admission at the entry) by entry:\n\n", rep.GoodputTokensPerS, rep.Stolen)
		b.WriteString("| entry | requests | ok | failed | tokens | queue wait p50 | queue wait p99 | TTFT p50 | TTFT p99 |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, e := range rep.Entries {
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %.0f ms | %.0f ms | %.0f ms | %.0f ms |\n", e.Entry, e.Requests, e.OK, e.Failed, e.Tokens,
				e.QueueWait.P50Ms, e.QueueWait.P99Ms, e.TTFT.P50Ms, e.TTFT.P99Ms)
		}
		b.WriteString("\n")
	}
	if len(rep.RetryErrors) > 0 {
		b.WriteString("Client retries (a 503/429 or a refused connection before any output, retried after Retry-After as the OpenAI SDKs do; TTFT counts from the first attempt):\n")
		for _, k := range slices.Sorted(maps.Keys(rep.RetryErrors)) {
			fmt.Fprintf(&b, "- %d× %s\n", rep.RetryErrors[k], k)
		}
		b.WriteString("\n")
	}
	if len(rep.Events) > 0 {
		b.WriteString("Recovery: from the event until a polled committed map covers every layer on live nodes AND a request sent after the event has succeeded.\n\n")
		b.WriteString("| t (s) | event | node | map healthy (s) | first request ok (s) | recovery (s) | map without it (s) |\n|---:|---|---|---:|---:|---:|---:|\n")
		for _, e := range rep.Events {
			rec := fmtS(e.RecoveryS)
			if e.Err != "" {
				rec = "error: " + e.Err
			} else if e.Skipped != "" {
				rec = "skipped: " + e.Skipped
			} else if !e.Recovered {
				rec = "NOT RECOVERED"
			}
			act := e.Action
			if e.Fault != "" && e.Fault != e.Action {
				act += " (" + e.Fault + ")"
			}
			fmt.Fprintf(&b, "| %.1f | %s | %s | %s | %s | %s | %s |\n", e.AtS, act, e.Node, fmtS(e.MapS), fmtS(e.RequestS), rec, fmtS(e.RepairedS))
		}
		b.WriteString("\n")
		joins := false
		for _, e := range rep.Events {
			joins = joins || e.ServeS >= 0
		}
		if joins {
			b.WriteString("Time to serve: from a join until a polled committed map places the node (a node without the file fetches its layers first, over its link).\n\n")
			b.WriteString("| t (s) | node | weights | link rate | serves after (s) |\n|---:|---|---|---|---:|\n")
			for _, e := range rep.Events {
				if e.ServeS < 0 && e.Action != ActJoin && e.Action != ActRejoin {
					continue
				}
				w, rate := "own file", e.Rate
				if e.Fetch {
					w = "fetched from peers"
				}
				if rate == "" {
					rate = "unlimited"
				}
				fmt.Fprintf(&b, "| %.1f | %s | %s | %s | %s |\n", e.AtS, e.Node, w, rate, fmtS(e.ServeS))
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("| t (s) | map epoch | leader | healthy | stages |\n|---:|---:|---|---|---|\n")
	for _, e := range rep.Epochs {
		fmt.Fprintf(&b, "| %.1f | %d | %s | %v | %s |\n", e.AtS, e.Epoch, e.Leader, e.Healthy, strings.Join(e.Stages, " "))
	}
	b.WriteString("\n| from (s) | to (s) | requests ok | failed | tokens | tokens/s |\n|---:|---:|---:|---:|---:|---:|\n")
	for _, t := range rep.Throughput {
		fmt.Fprintf(&b, "| %.0f | %.0f | %d | %d | %d | %.1f |\n", t.FromS, t.ToS, t.Requests, t.Failed, t.Tokens, t.TokensPerS)
	}
	if len(rep.Errors) > 0 {
		b.WriteString("\nErrors:\n")
		for _, k := range slices.Sorted(maps.Keys(rep.Errors)) {
			fmt.Fprintf(&b, "- %d× %s\n", rep.Errors[k], k)
		}
	}
	if len(rep.Crashed) > 0 {
		fmt.Fprintf(&b, "\nNodes that exited on their own: %s\n", strings.Join(rep.Crashed, ", "))
	}
	if len(rep.Reachability) > 0 {
		b.WriteString("\nReachability at the end of the load:\n\n| node | reachability | relay slots on | relayed for others | links |\n|---|---|---|---:|---|\n")
		for _, n := range rep.Reachability {
			if n.Err != "" {
				fmt.Fprintf(&b, "| %s | error: %s | | | |\n", n.Node, n.Err)
				continue
			}
			reach := n.Reachability
			if n.Unreachable {
				reach += ", UNREACHABLE"
			}
			var links []string
			for _, peer := range slices.Sorted(maps.Keys(n.Links)) {
				links = append(links, peer+" "+n.Links[peer])
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %.1f MB | %s |\n", n.Node, reach, strings.Join(n.Relays, " "), n.RelayedMB, strings.Join(links, ", "))
		}
	}
	joinsMarkdown(&b, rep.Joins)
	if rep.Monitor != nil {
		rep.Monitor.markdown(&b)
	}
	if rep.Trust != nil {
		rep.Trust.markdown(&b)
	}
	if rep.Nemesis != nil {
		rep.Nemesis.markdown(&b)
	} else if h := rep.History; h != nil {
		fmt.Fprintf(&b, "\nCommitted maps: linearizable %v (Porcupine %s), %d maps, %d lives.\n", h.Linearizable, h.Porcupine, h.Maps, h.Lives)
	}
	if rep.HistoryErr != "" {
		fmt.Fprintf(&b, "\nHistory checker: %s\n", rep.HistoryErr)
	}
	if rep.Pass {
		b.WriteString("\nResult: PASS\n")
	} else {
		fmt.Fprintf(&b, "\nResult: FAIL: %s\n", strings.Join(rep.Violations, "; "))
	}
	return b.String()
}

// NodeReach is one node's reachability diagnosis, as its /v1/swarm said.
type NodeReach struct {
	Node         string            `json:"node"`
	Reachability string            `json:"reachability,omitempty"`
	Unreachable  bool              `json:"unreachable,omitempty"`
	Relays       []string          `json:"relays,omitempty"`     // relays holding a slot for it
	RelayedMB    float64           `json:"relayed_mb,omitempty"` // carried for others
	Links        map[string]string `json:"links,omitempty"`
	// Stolen and StolenFrom: requests the node's entry took from peers'
	// queues (work stealing), and requests peers took from its queue.
	Stolen     int    `json:"stolen,omitempty"`
	StolenFrom int    `json:"stolen_from,omitempty"` // peer name → direct, hole-punched, relayed
	Err        string `json:"error,omitempty"`
}

// write saves report.md and report.json in dir.
func (rep *Report) write(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(rep.Markdown()), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	j, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(j, '\n'), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}
