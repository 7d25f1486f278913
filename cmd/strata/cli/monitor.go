package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/spf13/cobra"

	"github.com/stratanet/strata/monitor"
	"github.com/stratanet/strata/node"
	"github.com/stratanet/strata/swarm"
)

func newMonitorCmd() *cobra.Command {
	var (
		bootstrap, dhtBoot []string
		public             bool
		swarms             []string
		model, keyFile     string
		logLevel           string
		listen             string
		once, asJSON       bool
		every, timeout     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "monitor",
		Short: "a read-only health monitor of the swarms it can see (a table, or a web page)",
		Long: `monitor finds swarm members, asks each for its signed snapshot
(its latest heartbeats, the layer map it routes on, its links) and shows,
per swarm: the model, layer coverage and redundancy, the nodes with their
reachability (direct, hole-punched, relayed) and the tokens/s their signed
heartbeats' counters show. It joins no Raft, sends no heartbeats and serves
no layers.

Where it starts: --public looks up, on the public (Amino) DHT, the index
key every member of every public swarm provides (--dht-bootstrap names
other DHT bootstrap peers, e.g. strata dht-server stand-ins); --bootstrap
starts from members (and Strata's own DHT through them); --swarm NAME with
--model FINGERPRINT also looks up that swarm's rendezvous on both. From
the members found it follows every live peer their snapshots name.
Members it cannot dial (behind NAT, reachable through relays only) are
asked through a member connected to them, and their answer is still
signed by them. A node whose answer does not verify is listed as
unverified and counts in no figure.

With --once it crawls once and prints a table (--json: the report as
/api/swarms serves it). Otherwise it serves a page at --listen (and
/api/swarms) and crawls every --every.`,
		Example: `  strata monitor --public --listen 127.0.0.1:8090
  strata monitor --once --bootstrap /ip4/198.51.100.7/tcp/4001/p2p/12D3KooW...
  strata monitor --listen 127.0.0.1:8090 --bootstrap /ip4/198.51.100.7/tcp/4001/p2p/12D3KooW... --swarm lab --model sha256:...`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(dhtBoot) > 0 {
				public = true
			} else if public {
				dhtBoot = swarm.DefaultPublicBootstrap()
			}
			if len(swarms) > 0 && model == "" {
				return fmt.Errorf("%w: --swarm needs --model, the fingerprint of the model the swarm serves (its rendezvous key is derived from both)", monitor.ErrConfig)
			}
			if len(bootstrap) == 0 && !public {
				return fmt.Errorf("%w: give --public (the public DHT's swarms), --dht-bootstrap, or --bootstrap (a member or Strata DHT peer) to start from", monitor.ErrConfig)
			}
			log, err := node.NewLogger(logLevel, false)
			if err != nil {
				return fmt.Errorf("%w: --log-level: %w", monitor.ErrConfig, err)
			}
			opts := []monitor.Option{monitor.WithLogger(log), monitor.WithLimits(1024, timeout, 8)}
			for _, a := range bootstrap {
				ai, err := peer.AddrInfoFromString(a)
				if err != nil {
					return fmt.Errorf("%w: --bootstrap %q: %w", monitor.ErrConfig, a, err)
				}
				opts = append(opts, monitor.WithBootstrap(*ai))
			}
			if len(bootstrap) == 0 {
				opts = append(opts, monitor.WithoutDHT())
			}
			for _, s := range swarms {
				opts = append(opts, monitor.WithKeys(node.RendezvousKey(s, model)), monitor.WithPublicSwarm(s, model))
			}
			if public {
				boot := make([]peer.AddrInfo, 0, len(dhtBoot))
				for _, a := range dhtBoot {
					ai, err := peer.AddrInfoFromString(a)
					if err != nil {
						return fmt.Errorf("%w: --dht-bootstrap %q: %w", monitor.ErrConfig, a, err)
					}
					boot = append(boot, *ai)
				}
				opts = append(opts, monitor.WithPublicDHT(boot...))
			}
			if keyFile != "" {
				psk, err := swarm.LoadSwarmKey(keyFile)
				if err != nil {
					return err
				}
				opts = append(opts, monitor.WithSwarmKey(psk))
			}
			ctx := cmd.Context()
			sctx, cancel := context.WithTimeout(ctx, timeout)
			m, err := monitor.New(sctx, opts...)
			cancel()
			if err != nil {
				return err
			}
			defer m.Close()
			svc := monitor.NewService(m)
			if once {
				rep, err := svc.Refresh(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					enc := json.NewEncoder(cmd.OutOrStdout())
					enc.SetIndent("", "  ")
					return enc.Encode(rep)
				}
				return monitor.WriteText(cmd.OutOrStdout(), rep.Swarms)
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("monitor: listen: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "monitor page at http://%s/ (report at /api/swarms)\n", ln.Addr())
			srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 10 * time.Second}
			go svc.Run(ctx, every)
			go func() {
				<-ctx.Done()
				srv.Close()
			}()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&bootstrap, "bootstrap", nil, "full multiaddr (with /p2p/ID) of a swarm member or DHT peer to start from (repeatable)")
	fl.BoolVar(&public, "public", false, "find public swarms on the public (Amino) DHT through its well-known bootstrap peers")
	fl.StringSliceVar(&dhtBoot, "dht-bootstrap", nil, "public DHT bootstrap peer, full multiaddr with /p2p/ID (repeatable; implies --public)")
	fl.StringSliceVar(&swarms, "swarm", nil, "swarm name whose rendezvous to look up as well (repeatable; with --model)")
	fl.StringVar(&model, "model", "", "the model fingerprint the --swarm members serve (scopes their rendezvous key)")
	fl.StringVar(&keyFile, "swarm-key", "", "pre-shared key file of a private swarm (connects only; joins nothing)")
	fl.StringVar(&listen, "listen", "127.0.0.1:8090", "address of the web page and /api/swarms")
	fl.BoolVar(&once, "once", false, "crawl once, print a table and exit")
	fl.BoolVar(&asJSON, "json", false, "with --once: print the report as JSON")
	fl.DurationVar(&every, "every", 30*time.Second, "time between crawls while serving the page")
	fl.StringVar(&logLevel, "log-level", "warn", "log level (debug, info, warn, error)")
	fl.DurationVar(&timeout, "timeout", 10*time.Second, "time to wait for each peer")
	return cmd
}
