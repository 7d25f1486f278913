package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stratanet/strata/swarm"
)

func newSwarmKeyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "swarm-key", Short: "make keys for private swarms"}
	cmd.AddCommand(newSwarmKeyGenCmd())
	return cmd
}

func newSwarmKeyGenCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "gen",
		Short: "write a new pre-shared swarm key file (libp2p pnet v1 format)",
		Long: `gen writes a new random 256-bit swarm key. Give the same file to every node
of a private swarm with --swarm-key: hosts without it cannot connect at all.
A host with a swarm key runs on TCP only (go-libp2p runs no QUIC with a
pre-shared key). The file is written with mode 0600 and never overwritten;
--out - prints the key instead.`,
		Example: `  strata swarm-key gen --out swarm.key
  strata node --swarm-key swarm.key --bootstrap /ip4/10.0.0.2/tcp/4001/p2p/12D3KooW...`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			psk, err := swarm.GenerateSwarmKey()
			if err != nil {
				return err
			}
			if out == "-" {
				_, err := cmd.OutOrStdout().Write(swarm.EncodeSwarmKey(psk))
				return err
			}
			if err := swarm.WriteSwarmKeyFile(out, psk); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote swarm key to %s; share it with every member over a secure channel\n", out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "swarm.key", "file to write (- for stdout)")
	return cmd
}
