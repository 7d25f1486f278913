package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/stratanet/strata/swarm"
)

// swarmFlags are the node's networking flags. The node command adds its
// own beside them.
type swarmFlags struct {
	dataDir    string
	listen     []string
	bootstrap  []string
	swarmKey   string
	relay      bool
	swarmName  string
	model      string
	portMap    bool
	reach      string
	heartbeat  time.Duration
	tableEvery time.Duration
	logLevel   string
}

func (f *swarmFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.dataDir, "data-dir", defaultDataDir(), "directory for the node's identity key and state")
	fl.StringSliceVar(&f.listen, "listen", swarm.DefaultListenAddrs, "listen multiaddrs (QUIC ones are dropped under a swarm key); \"none\": reachable only through relays")
	fl.StringSliceVar(&f.bootstrap, "bootstrap", nil, "full multiaddrs (with /p2p/ID) of peers to join through; none founds a swarm")
	fl.StringVar(&f.swarmKey, "swarm-key", "", "pre-shared swarm key file for a private swarm (see strata swarm-key gen)")
	fl.BoolVar(&f.relay, "relay", true, "act as a circuit relay for unreachable peers when publicly reachable")
	fl.StringVar(&f.swarmName, "swarm", swarm.DefaultSwarmName, "swarm name: scopes gossip topics and the rendezvous key")
	fl.StringVar(&f.model, "model", "", "model name: scopes the rendezvous key")
	fl.StringVar(&f.reach, "reachability", "auto", "auto (AutoNAT decides), public (serve as relay) or private (reserve relay slots)")
	fl.BoolVar(&f.portMap, "nat-portmap", false, "ask the router for a port mapping (UPnP / NAT-PMP)")
	fl.DurationVar(&f.heartbeat, "heartbeat", swarm.DefaultHeartbeatInterval, "heartbeat interval")
	fl.DurationVar(&f.tableEvery, "log-peers", 5*time.Second, "how often to log the peer table (0: never)")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
}

func defaultDataDir() string {
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".strata")
	}
	return ".strata"
}

// options turns the flags into swarm options.
func (f *swarmFlags) options(log *zap.Logger) ([]swarm.Option, error) {
	opts := []swarm.Option{
		swarm.WithLogger(log),
		swarm.WithDataDir(f.dataDir),
		swarm.WithBootstrap(f.bootstrap...),
		swarm.WithRelayService(f.relay),
		swarm.WithSwarmName(f.swarmName),
		swarm.WithModel(f.model),
		swarm.WithNATPortMap(f.portMap),
		swarm.WithHeartbeatInterval(f.heartbeat),
	}
	switch f.reach {
	case "auto":
	case "public":
		opts = append(opts, swarm.WithReachability(swarm.ReachabilityPublic))
	case "private":
		opts = append(opts, swarm.WithReachability(swarm.ReachabilityPrivate))
	default:
		return nil, fmt.Errorf("--reachability %q: want auto, public or private", f.reach)
	}
	if len(f.listen) == 1 && f.listen[0] == "none" {
		opts = append(opts, swarm.WithNoListen())
	} else {
		opts = append(opts, swarm.WithListenAddrs(f.listen...))
	}
	if f.swarmKey != "" {
		psk, err := swarm.LoadSwarmKey(f.swarmKey)
		if err != nil {
			return nil, err
		}
		opts = append(opts, swarm.WithSwarmKey(psk))
	}
	return opts, nil
}

func newLogger(level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	cfg := zap.NewDevelopmentConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.DisableStacktrace = true
	cfg.EncoderConfig.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
	return cfg.Build()
}

func newNodeCmd() *cobra.Command {
	var f swarmFlags
	cmd := &cobra.Command{
		Use:   "node",
		Short: "run a Strata node: join (or found) a swarm and log its peer table",
		Long: `node starts a swarm member: a libp2p host with a persistent identity in
--data-dir, DHT discovery, signed heartbeat gossip and the peer table. It
prints its full multiaddrs (with /p2p/ID) at start; give one of them to other
nodes as --bootstrap. With no --bootstrap it founds a swarm.`,
		Example: `  strata node --data-dir /tmp/n1 --listen /ip4/127.0.0.1/tcp/4001
  strata node --data-dir /tmp/n2 --listen /ip4/127.0.0.1/tcp/4002 \
      --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW...`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(f.logLevel)
			if err != nil {
				return err
			}
			defer log.Sync() //nolint:errcheck
			opts, err := f.options(log)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runNode(ctx, cmd, log, f, opts)
		},
	}
	f.register(cmd)
	return cmd
}

func runNode(ctx context.Context, cmd *cobra.Command, log *zap.Logger, f swarmFlags, opts []swarm.Option) error {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	h, err := swarm.New(sctx, opts...)
	cancel()
	if err != nil {
		return err
	}
	defer h.Close()
	if err := h.SetStatus(swarm.Status{State: swarm.StateJoining, FreeKV: -1}); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "peer ID %s\n", h.ID())
	printed := printAddrs(out, h, "")

	events, stopWatch := h.Peers().Watch(256)
	defer stopWatch()
	var tick <-chan time.Time
	if f.tableEvery > 0 {
		t := time.NewTicker(f.tableEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			log.Info("shutting down")
			return nil
		case ev := <-events:
			if ev.Forgotten {
				log.Info("peer forgotten", zap.Stringer("peer", ev.Peer))
			} else {
				log.Info("peer", zap.Stringer("peer", ev.Peer), zap.Stringer("from", ev.From), zap.Stringer("to", ev.To))
			}
		case <-tick:
			printed = printAddrs(out, h, printed)
			logPeerTable(log, h)
		}
	}
}

// printAddrs prints the host's full multiaddrs when they differ from the
// last ones printed (a relayed node gets its addresses after start).
func printAddrs(out io.Writer, h *swarm.Host, last string) string {
	var b strings.Builder
	for _, a := range h.Addrs() {
		fmt.Fprintf(&b, "listening on %s\n", a)
	}
	if s := b.String(); s != last {
		fmt.Fprint(out, s)
		return s
	}
	return last
}

func logPeerTable(log *zap.Logger, h *swarm.Host) {
	peers := h.Peers().Snapshot()
	log.Info("peer table", zap.Int("rows", len(peers)), zap.Int("alive", len(h.Peers().Live())))
	for _, p := range peers {
		fields := []zap.Field{
			zap.Stringer("peer", p.ID),
			zap.Stringer("liveness", p.Liveness),
			zap.Bool("connected", p.Connected),
			zap.Bool("relayed", p.Relayed),
			zap.Duration("rtt", p.RTT),
		}
		if hb := p.Heartbeat; hb != nil {
			fields = append(fields,
				zap.Stringer("state", hb.State),
				zap.String("range", fmt.Sprintf("[%d,%d)", hb.RangeStart, hb.RangeEnd)),
				zap.Uint64("epoch", hb.Epoch),
				zap.Int("queue", hb.QueueDepth),
				zap.Int("sessions", hb.ActiveSessions),
				zap.Int64("free_kv", hb.FreeKV),
				zap.Duration("heard_ago", time.Since(p.HeardAt).Round(time.Millisecond)),
			)
		}
		if r := p.Rejected.Total(); r > 0 {
			fields = append(fields, zap.Uint64("rejected", r))
		}
		log.Info("  peer", fields...)
	}
}
