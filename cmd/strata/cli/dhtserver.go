package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/stratanet/strata/node"
	"github.com/stratanet/strata/swarm"
)

func newDHTServerCmd() *cobra.Command {
	var (
		dataDir, logLevel string
		listen, bootstrap []string
	)
	cmd := &cobra.Command{
		Use:   "dht-server",
		Short: "run only a server of the public (Amino) DHT protocol: a bootstrap node for public swarms",
		Long: `dht-server runs a libp2p host with nothing but a DHT server on the Amino
protocol (/ipfs/kad/1.0.0), the public DHT that public swarms are found by
name through. It stands in for the public network's bootstrap nodes where
those are out of reach (the netns testnet, a closed lab), and a community
may run a few for its swarms: nodes name them with --dht-bootstrap. It knows
nothing of Strata; it stores and answers provider records like any Amino
server. It prints its full multiaddrs (with /p2p/ID) at start.`,
		Example: `  strata dht-server --data-dir /var/lib/strata-dht --listen /ip4/0.0.0.0/tcp/4001
  strata node --swarm my-swarm --model m.gguf --dht-bootstrap /ip4/203.0.113.7/tcp/4001/p2p/12D3KooW...`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := node.NewLogger(logLevel, false)
			if err != nil {
				return err
			}
			defer log.Sync() //nolint:errcheck
			opts := []swarm.Option{swarm.WithLogger(log.Named("dht")), swarm.WithDataDir(dataDir), swarm.WithBootstrap(bootstrap...)}
			if len(listen) > 0 {
				opts = append(opts, swarm.WithListenAddrs(listen...))
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			s, err := swarm.NewDHTServer(sctx, opts...)
			cancel()
			if err != nil {
				return err
			}
			defer s.Close()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "peer ID %s\n", s.ID())
			for _, a := range s.Addrs() {
				fmt.Fprintf(out, "listening on %s\n", a)
			}
			<-ctx.Done()
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&dataDir, "data-dir", "", "directory for the server's identity key (empty: a new identity each start)")
	fl.StringSliceVar(&listen, "listen", nil, "listen multiaddrs (default TCP and QUIC on port 4001)")
	fl.StringSliceVar(&bootstrap, "bootstrap", nil, "other DHT servers to join: full multiaddrs with /p2p/ID")
	fl.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	return cmd
}
