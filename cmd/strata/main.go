// Command strata runs a Strata node and its tools.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "strata:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "strata",
		Short:         "Strata turns volunteer GPU machines into one LLM inference service",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newPlanCmd(), newModelCmd(), newNodeCmd(), newSwarmKeyCmd(), newGenerateCmd(), newDebugCmd(), newChatCmd(), newStatusCmd(), newSwarmCmd(), newTestnetCmd(), newSimCmd())
	return root
}
