package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/stratanet/strata/sim"
)

func newSimCmd() *cobra.Command {
	var (
		file    string
		policy  []string
		asJSON  bool
		svgPath string
		kvObj   bool
		clients int
	)
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Simulate a swarm on a virtual clock and compare policies",
		Long: `sim runs a scenario through Strata's discrete-event simulator. A helix
section replays Helix's (ASPLOS'25) published simulations with their own
placements, request streams and schedulers and prints the published decode
throughput next to ours.`,
		Example: `  strata sim --scenario testdata/sim/helix-calibration.yaml
  strata sim --scenario testdata/sim/single24-swarm.yaml --json --svg out.svg
  strata sim --scenario testdata/sim/single24-capacity.yaml --clients 512`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return fmt.Errorf("sim: give --scenario FILE")
			}
			data, err := os.ReadFile(file)
			if err != nil {
				return err
			}
			sc, err := sim.ParseScenario(file, data)
			if err != nil {
				return err
			}
			if kvObj {
				sc.KVObjective = true
			}
			if cmd.Flags().Changed("clients") {
				if clients <= 0 {
					return fmt.Errorf("sim: --clients %d: want a positive count", clients)
				}
				sc.Workload.Clients = clients
			}
			rep, err := sim.Run(cmd.Context(), sc, time.Now, policy...)
			if err != nil {
				return err
			}
			if svgPath != "" {
				f, err := os.Create(svgPath)
				if err != nil {
					return err
				}
				if err := rep.WriteSVG(f); err != nil {
					f.Close()
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return rep.WriteText(out)
		},
	}
	cmd.Flags().StringVar(&file, "scenario", "", "simulation scenario YAML")
	cmd.Flags().StringArrayVar(&policy, "policy", nil, "policy to run (repeatable; default all): strata, petals, parallax, helix-published")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&kvObj, "kv-objective", false, "Strata plans with each node capped by the sessions its KV memory holds at the workload's mean length")
	cmd.Flags().IntVar(&clients, "clients", 0, "cap the requests in flight at this many clients (a closed loop; overrides the scenario's workload clients)")
	cmd.Flags().StringVar(&svgPath, "svg", "", "write a throughput-over-time SVG here")
	return cmd
}
