package main

import "github.com/spf13/cobra"

func newPlanCmd() *cobra.Command {
	return &cobra.Command{Use: "plan", Short: "plan layer placement for a scenario", RunE: func(*cobra.Command, []string) error { return nil }}
}
