package sim

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
)

// WriteText prints a report as tables.
func (r Report) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "scenario %s\n\n", r.Scenario)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tdecode tok/s\tgoodput tok/s\tTTFT p50 ms\tTTFT p99 ms\tTPOT p50 ms\tTPOT p99 ms\tcompleted\tfailed\tevents\t")
	for _, p := range r.Policies {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t\n", p.Policy, p.DecodeTokS, p.GoodputTokS,
			ms(p.TTFTp50ms), ms(p.TTFTp99ms), ms(p.TPOTp50ms), ms(p.TPOTp99ms), p.Completed, p.Failed, p.events)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range r.notes {
		fmt.Fprintln(w, n)
	}
	if r.hasSwarm() {
		fmt.Fprintln(w, "\nchurn and control plane:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "policy\tdeaths\tjoins\tretried\tincomplete coverage s\tmoves\tGB loaded\trecoveries (lost coverage)\trecovery p50 s\trecovery max s\tleader decisions\tevents/s\t")
		for _, p := range r.Policies {
			sw := p.swarm
			if sw == nil {
				continue
			}
			var lost []float64
			for _, x := range sw.Recoveries {
				if x > 0 {
					lost = append(lost, x)
				}
			}
			mx := 0.0
			for _, x := range lost {
				mx = math.Max(mx, x)
			}
			p50 := percentile(lost, 0.5)
			if len(lost) == 0 {
				p50 = 0
			}
			dec := "-"
			if sw.LeaderDecisions > 0 {
				dec = fmt.Sprintf("%d (%d errors, %d stalls)", sw.LeaderDecisions, sw.LeaderErrors, sw.LeaderStalls)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0f\t%d\t%.0f\t%d of %d\t%.1f\t%.1f\t%s\t%.0f\t\n", p.Policy, sw.Deaths, sw.Joins, sw.Retried,
				sw.IncompleteS, sw.Moves, sw.BytesLoaded/1e9, len(lost), len(sw.Recoveries), p50, mx, dec, sw.EventsPerSec)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if err := r.writeCauses(w); err != nil {
		return err
	}
	for _, p := range r.Policies {
		if eq, pc := p.EntryQueue, p.PrefixCache; eq != nil && pc != nil {
			fmt.Fprintf(w, "\n%s: entry queue: %d waited, %d refused, wait p50 %s ms p99 %s ms; prefix cache: %d hop resumes (%d positions), %d misses, %d attempts resumed on every hop, %d evictions\n",
				p.Policy, eq.Queued, eq.Refused, ms(eq.WaitP50ms), ms(eq.WaitP99ms), pc.Hits, pc.Reused, pc.Misses, pc.Resumed, pc.Evictions)
		}
	}
	if err := r.writeUse(w); err != nil {
		return err
	}
	if len(r.Published) > 0 {
		fmt.Fprintln(w, "\npublished (Helix's simulator) vs simulated (ours), decode tok/s:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "policy\tpublished\tsimulated\tratio\tsource\t")
		for _, p := range r.Published {
			fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.3f\t%s\t\n", p.Policy, p.GoodputTokS, p.Simulated, p.Simulated/p.GoodputTokS, p.Source)
		}
		return tw.Flush()
	}
	return nil
}

// WriteSVG draws decode throughput over time, one line per policy.
func (r Report) WriteSVG(w io.Writer) error {
	const W, H, L, B, T, R = 800.0, 420.0, 60.0, 40.0, 30.0, 180.0
	maxY, maxX := 1.0, 1.0
	for _, p := range r.Policies {
		for i, v := range p.series {
			maxY = math.Max(maxY, v/p.bin)
			maxX = math.Max(maxX, float64(i+1)*p.bin)
		}
	}
	x := func(t float64) float64 { return L + (W-L-R)*t/maxX }
	y := func(v float64) float64 { return H - B - (H-B-T)*v/maxY }
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&sb, `<rect width="100%%" height="100%%" fill="white"/><text x="%g" y="18">%s: decode tokens/s over time</text>`+"\n", L, esc(r.Scenario))
	fmt.Fprintf(&sb, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/><line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n",
		L, H-B, W-R, H-B, L, T, L, H-B)
	for i := 0; i <= 4; i++ {
		v := maxY * float64(i) / 4
		fmt.Fprintf(&sb, `<text x="%g" y="%g" text-anchor="end">%.0f</text>`+"\n", L-5, y(v)+4, v)
		t := maxX * float64(i) / 4
		fmt.Fprintf(&sb, `<text x="%g" y="%g" text-anchor="middle">%.0f s</text>`+"\n", x(t), H-B+16, t)
	}
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}
	for k, p := range r.Policies {
		c := colors[k%len(colors)]
		var pts []string
		for i, v := range p.series {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x((float64(i)+0.5)*p.bin), y(v/p.bin)))
		}
		fmt.Fprintf(&sb, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", c, strings.Join(pts, " "))
		fmt.Fprintf(&sb, `<text x="%g" y="%g" fill="%s">%s</text>`+"\n", W-R+10, T+16*float64(k+1), c, esc(p.Policy))
	}
	sb.WriteString("</svg>\n")
	_, err := io.WriteString(w, sb.String())
	return err
}

// ms prints a latency: whole milliseconds, tenths below 100 ms.
func ms(v float64) string {
	if v < 100 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// writeCauses lists why requests failed and why attempts broke.
func (r Report) writeCauses(w io.Writer) error {
	any := false
	for _, p := range r.Policies {
		any = any || len(p.FailedByCause) > 0 || len(p.BrokenByCause) > 0
	}
	if !any {
		return nil
	}
	fmt.Fprintln(w, "\nfailures by cause (failed for good; attempts broken, each replayed or failed):")
	for _, p := range r.Policies {
		if len(p.FailedByCause) == 0 && len(p.BrokenByCause) == 0 {
			continue
		}
		fmt.Fprintf(w, "  %s: failed %d (%d where another path existed): %s; broken: %s\n", p.Policy, p.Failed,
			p.FailedWithPath, counts(p.FailedByCause), counts(p.BrokenByCause))
	}
	return nil
}

// counts prints a count map in key order.
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func (r Report) hasSwarm() bool {
	for _, p := range r.Policies {
		if p.swarm != nil {
			return true
		}
	}
	return false
}

// writeUse lists each swarm policy's machine use by machine type.
func (r Report) writeUse(w io.Writer) error {
	if !r.hasSwarm() {
		return nil
	}
	fmt.Fprintln(w, "\nmachine use by type (busy: share of the run computing; KV: peak reserved / capacity):")
	for _, p := range r.Policies {
		if len(p.UseByGPU) == 0 {
			continue
		}
		parts := make([]string, 0, len(p.UseByGPU))
		for _, u := range p.UseByGPU {
			parts = append(parts, fmt.Sprintf("%s ×%d (%d serving) busy %.2f mean %.2f max, KV %.2f",
				u.GPU, u.Nodes, u.Serving, u.BusyMean, u.BusyMax, u.KVPeakMean))
		}
		fmt.Fprintf(w, "  %s: %s\n", p.Policy, strings.Join(parts, "; "))
	}
	return nil
}
