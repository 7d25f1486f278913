package cli

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/stratanet/strata/testnet"
)

// exitSkipped is the exit status of a scenario that needs a network this
// machine cannot give (make soak counts it as skipped, not failed).
const exitSkipped = 3

func newTestnetCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "testnet", Short: "run scenarios on a local swarm of real nodes"}
	var bin, runDir, report string
	run := &cobra.Command{
		Use:   "run SCENARIO.yaml",
		Short: "start the scenario's nodes, drive its load and events, and write a report",
		Long: `run starts the scenario's strata node processes (this binary unless --bin)
on its network, drives its client load and its events (join, kill, leave,
kill_leader, rejoin, partition, heal), stops every process it started, and
writes report.md and report.json in the run directory (--run-dir, default a
new one under the temporary directory). The exit status is 0 when the run
meets the scenario's expect section, 1 when it does not or could not run,
and 3 when the scenario needs a network this machine cannot give (such as
namespaces without root).`,
		Example: `  strata testnet run testdata/testnet/churn-3.yaml
  strata testnet run testdata/testnet/steady-5.yaml --bin bin/strata --report /tmp/steady.md`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sc, err := testnet.LoadScenario(args[0])
			if err != nil {
				return err
			}
			opts := []testnet.Option{testnet.WithProgress(cmd.ErrOrStderr())}
			if bin != "" {
				opts = append(opts, testnet.WithBinary(bin))
			}
			if runDir != "" {
				opts = append(opts, testnet.WithRunDir(runDir))
			}
			// A signal stops the run; Run kills the nodes it started.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, err := testnet.Run(ctx, sc, opts...)
			if errors.Is(err, testnet.ErrNeedsRoot) || errors.Is(err, testnet.ErrUnsupported) {
				fmt.Fprintf(cmd.ErrOrStderr(), "SKIP %s: %v\n", args[0], err)
				stop()
				os.Exit(exitSkipped) // Run has stopped everything it started
			}
			if err != nil {
				return err
			}
			md := rep.Markdown()
			fmt.Fprint(cmd.OutOrStdout(), md)
			if report != "" {
				if err := os.WriteFile(report, []byte(md), 0o644); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "report: %s/report.md and report.json\n", rep.RunDir)
			if !rep.Pass {
				return fmt.Errorf("scenario %s failed its expectations", sc.Name)
			}
			return nil
		},
	}
	f := run.Flags()
	f.StringVar(&bin, "bin", "", "strata binary to run the nodes with (default: this one)")
	f.StringVar(&runDir, "run-dir", "", "directory for the model, data dirs, logs and report (default: a new temporary one)")
	f.StringVar(&report, "report", "", "also write the Markdown report to this file")
	cmd.AddCommand(run)
	return cmd
}
