package cli

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/spf13/cobra"

	"github.com/stratanet/strata/consensus"
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
	tokens := &cobra.Command{
		Use:   "plan-session-tokens N",
		Short: "set the mean session length (prompt plus output tokens) the planner caps each node's KV memory by (0: no cap)",
		Long: `plan-session-tokens sets, in the swarm's replicated state, the mean
session length the leader's planner assumes (POST /v1/swarm/config on the
leader's API): each node's rate is capped by the sessions of that length its
KV memory holds beside its layers, so that memory-bound and slow nodes get
fewer layers. 0 turns the cap off. The leader plans with it from its next
decision; the map changes when a rebalance or a repair says a new one pays.
Only the leader can append it: another node answers with the leader's peer ID.`,
		Example: `  strata swarm set plan-session-tokens 1000 --api http://127.0.0.1:8080`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[0])
			if err != nil || n < 0 || n > consensus.MaxSessionTokens {
				return fmt.Errorf("plan session tokens %q: want a whole number from 0 (no cap) to %d", args[0], consensus.MaxSessionTokens)
			}
			c, err := apiClient(apiURL, keyFile)
			if err != nil {
				return err
			}
			if err := c.SetSwarmSessionTokens(cmd.Context(), n); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "swarm plan session tokens set to %d\n", n)
			return nil
		},
	}
	stewards := &cobra.Command{
		Use:   "stewards ID[,ID...]",
		Short: "set the swarm's stewards, the only nodes that vote in its Raft (peer IDs)",
		Long: `stewards signs a new steward set with the leader's host key and appends it
to the swarm's replicated state (POST /v1/swarm/config on the leader's API).
Once a swarm has stewards only they vote; every other member serves layers
and routes requests as a non-voter, so a crowd of Sybil nodes cannot take
the layer map (docs/internet.md). The swarm admits the first set only from
its founder and later ones only from a current steward, and every member
checks the signature. Only the leader can append it: another node answers
with the leader's peer ID. The founder usually names them at start instead,
with strata node --stewards.`,
		Example: `  strata swarm set stewards 12D3KooWA...,12D3KooWB...,12D3KooWC... --api http://127.0.0.1:8080`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var ids []string
			for _, a := range args {
				for _, id := range strings.Split(a, ",") {
					if id = strings.TrimSpace(id); id == "" {
						continue
					}
					if _, err := peer.Decode(id); err != nil {
						return fmt.Errorf("steward %q: not a peer ID: %w", id, err)
					}
					ids = append(ids, id)
				}
			}
			if len(ids) == 0 || len(ids) > consensus.MaxStewards {
				return fmt.Errorf("%d stewards: give 1 to %d peer IDs", len(ids), consensus.MaxStewards)
			}
			c, err := apiClient(apiURL, keyFile)
			if err != nil {
				return err
			}
			if err := c.SetSwarmStewards(cmd.Context(), ids); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "swarm stewards set to %s\n", strings.Join(ids, ","))
			return nil
		},
	}
	for _, sub := range []*cobra.Command{rate, tokens, stewards} {
		fl := sub.Flags()
		fl.StringVar(&apiURL, "api", "http://127.0.0.1:8080", "the leader's API URL")
		fl.StringVar(&keyFile, "api-key-file", "", "file holding the API key, if the node requires one")
		set.AddCommand(sub)
	}
	cmd.AddCommand(set)
	return cmd
}
