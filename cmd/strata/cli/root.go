// Package cli is the strata command line. It is a package, not package
// main, so that a binary built in another module can run the same
// commands with more engines: engine/ggml's cmd/strata registers the
// ggml engine (RegisterEngine) and calls Main.
package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// Main runs the command line on os.Args and exits on an error.
func Main() {
	if err := NewRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "strata:", err)
		os.Exit(1)
	}
}

// NewRoot is the root command with every subcommand.
func NewRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "strata",
		Short:         "Strata turns volunteer GPU machines into one LLM inference service",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newPlanCmd(), newModelCmd(), newNodeCmd(), newSwarmKeyCmd(), newGenerateCmd(), newDebugCmd(), newChatCmd(), newStatusCmd(), newSwarmCmd(), newTestnetCmd(), newSimCmd(), newDHTServerCmd(), newMonitorCmd())
	return root
}
