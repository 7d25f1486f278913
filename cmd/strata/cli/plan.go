package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/stratanet/strata/layers/scenario"
)

func newPlanCmd() *cobra.Command {
	var (
		files    []string
		asJSON   bool
		random   int
		seed     uint64
		showMaps bool
	)
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Plan layer placement for scenarios with our planner and the baselines",
		Long: `plan places a model's layers on a node set with Strata's planner and with
the Petals and Parallax baselines, and prints for each policy the map, its
flow (tokens/s), the bounds UB and UB2, flow/UB, flow/UB2, the best path's
per-token latency and the planning time.`,
		Example: `  strata plan --scenario testdata/scenarios/mixed-consumer.yaml
  strata plan --random 10 --seed 1 --json`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var scs []*scenario.Scenario
			for _, f := range files {
				data, err := os.ReadFile(f)
				if err != nil {
					return err
				}
				sc, err := scenario.Parse(f, data)
				if err != nil {
					return err
				}
				scs = append(scs, sc)
			}
			if random > 0 {
				scs = append(scs, scenario.Random(random, seed)...)
			}
			if len(scs) == 0 {
				return errors.New("plan: give --scenario FILE or --random N")
			}
			var reports []scenario.Report
			for _, sc := range scs {
				rep, err := scenario.Run(cmd.Context(), sc, scenario.Options{Now: time.Now})
				if err != nil {
					return err
				}
				reports = append(reports, rep)
				if !asJSON {
					printReport(cmd.OutOrStdout(), rep, showMaps || rep.Nodes <= 40)
				}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(reports)
			}
			if len(reports) > 1 {
				printSummary(out, reports)
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&files, "scenario", nil, "scenario YAML file (repeatable)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().IntVar(&random, "random", 0, "also plan N generated heterogeneous scenarios")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed for --random")
	cmd.Flags().BoolVar(&showMaps, "maps", false, "print every map in full, even for large node sets")
	return cmd
}

func printReport(w io.Writer, rep scenario.Report, maps bool) {
	fmt.Fprintf(w, "== %s: %s on %d nodes   UB %.0f tok/s   UB2 %.0f tok/s\n", rep.Scenario, rep.Model, rep.Nodes, rep.UB, rep.UB2)
	printNeeds(w, rep)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tstatus\tflow tok/s\tflow/UB\tflow/UB2\tlatency ms\tstages\tlayers/stage\thops\trepl\tplan time\t")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.3f\t%.3f\t%s\t%d\t%d..%d\t%d\t%d\t%s\t\n", r.Policy, r.Status, r.Flow, r.FlowUB, r.FlowUB2,
			ms(r.Latency), r.Stages.Nodes, r.Stages.MinLayers, r.Stages.MaxLayers, r.Stages.PathHops, r.Stages.Replication,
			r.Time.Round(time.Microsecond))
	}
	tw.Flush()
	for _, r := range rep.Results {
		if r.Note != "" {
			fmt.Fprintf(w, "  note (%s): %s\n", r.Policy, r.Note)
		}
		if r.Error != "" {
			fmt.Fprintf(w, "  %s: %s\n", r.Policy, r.Error)
		}
	}
	if !maps {
		fmt.Fprintln(w)
		return
	}
	for _, r := range rep.Results {
		if len(r.Map.Stages) == 0 {
			continue
		}
		fmt.Fprintf(w, "-- %s map\n", r.Policy)
		drawMap(w, r)
	}
	fmt.Fprintln(w)
}

// printNeeds says how many volunteers the model needs: per kind alone,
// and of this fleet.
func printNeeds(w io.Writer, rep scenario.Report) {
	fmt.Fprintf(w, "   weights %.1f GB, %.1fB parameters active per token; fewest nodes to hold it once: ",
		rep.WeightBytes/1e9, rep.ActiveParams/1e9)
	if rep.MinNodes > 0 {
		fmt.Fprintf(w, "%d of these\n", rep.MinNodes)
	} else {
		fmt.Fprintln(w, "more than these")
	}
	for _, n := range rep.Needs {
		need := "cannot hold a layer"
		if n.Min > 0 {
			need = fmt.Sprintf("%d alone", n.Min)
		}
		fmt.Fprintf(w, "     %-12s have %4d  %3d layers each  need %s\n", n.Kind, n.Have, n.Layers, need)
	}
}

// drawMap prints one line per stage: node, range, and a bar over the layers.
func drawMap(w io.Writer, r scenario.Result) {
	stages := append(r.Map.Stages[:0:0], r.Map.Stages...)
	sort.SliceStable(stages, func(i, j int) bool {
		if stages[i].Start != stages[j].Start {
			return stages[i].Start < stages[j].Start
		}
		return stages[i].Node < stages[j].Node
	})
	width := 60
	L := r.Map.Layers
	for _, s := range stages {
		a := s.Start * width / L
		b := max(s.End*width/L, a+1)
		bar := strings.Repeat(" ", a) + strings.Repeat("█", b-a) + strings.Repeat(" ", width-b)
		fmt.Fprintf(w, "  %-16s %-9s |%s|\n", s.Node, s.Range, bar)
	}
}

func ms(sec float64) string {
	if math.IsInf(sec, 0) || math.IsNaN(sec) {
		return "-"
	}
	return fmt.Sprintf("%.1f", sec*1000)
}

// printSummary gives the geometric means of ours over each baseline.
func printSummary(w io.Writer, reports []scenario.Report) {
	logSum := map[string]float64{}
	count := map[string]int{}
	below := map[string]int{}
	for _, rep := range reports {
		ours, ok := rep.Result(scenario.Ours)
		if !ok || ours.Flow <= 0 {
			continue
		}
		for _, r := range rep.Results {
			if r.Policy == scenario.Ours || r.Flow <= 0 {
				continue
			}
			logSum[r.Policy] += math.Log(ours.Flow / r.Flow)
			count[r.Policy]++
			if ours.Flow < r.Flow*(1-1e-9) {
				below[r.Policy]++
			}
		}
	}
	fmt.Fprintf(w, "== summary over %d scenarios\n", len(reports))
	names := make([]string, 0, len(count))
	for n := range count {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  strata/%s: geometric mean %.2f× over %d scenarios where both planned; strata below it in %d\n",
			n, math.Exp(logSum[n]/float64(count[n])), count[n], below[n])
	}
}
