package cli

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
)

// newSwarmCmd is `strata swarm`: the swarm's replicated configuration.
func newSwarmCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "swarm", Short: "change the swarm's replicated configuration"}
	set := &cobra.Command{Use: "set", Short: "set one setting of the swarm's replicated configuration"}
	var apiURL, keyFile string
	rate := &cobra.Command{
		Use:   "verify-rate RATE",
		Short: "set the share of token boundaries at which entries spot-check a hop (0 to 1)",
		Long: `verify-rate sets the swarm's spot-check rate in its replicated state
(POST /v1/swarm/config on the leader's API). Every entry that was not given
its own --verify-rate follows it from the next commit. Only the leader can
append it: another node answers with the leader's peer ID.`,
		Example: `  strata swarm set verify-rate 0.05 --api http://127.0.0.1:8080`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := strconv.ParseFloat(args[0], 64)
			if err != nil || !(r >= 0 && r <= 1) {
				return fmt.Errorf("verify rate %q: want a number from 0 to 1", args[0])
			}
			c, err := apiClient(apiURL, keyFile)
			if err != nil {
				return err
			}
			if err := c.SetSwarmVerifyRate(cmd.Context(), r); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "swarm verify rate set to %g\n", r)
			return nil
		},
	}
	fl := rate.Flags()
	fl.StringVar(&apiURL, "api", "http://127.0.0.1:8080", "the leader's API URL")
	fl.StringVar(&keyFile, "api-key-file", "", "file holding the API key, if the node requires one")
	set.AddCommand(rate)
	cmd.AddCommand(set)
	return cmd
}
