package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	ma "github.com/multiformats/go-multiaddr"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/store"
	"github.com/stratanet/strata/node"
	"github.com/stratanet/strata/node/api"
	"github.com/stratanet/strata/node/config"
	"github.com/stratanet/strata/swarm"
)

// demoFlags drive one generation from the command line once the swarm
// serves; they are a convenience, not configuration.
type demoFlags struct {
	prompt      string
	maxTokens   int
	temperature float32
	seed        uint64
}

func (d *demoFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&d.prompt, "prompt", "", "once the swarm can serve, generate from this prompt through it, print the text, and keep serving")
	fl.IntVar(&d.maxTokens, "max-tokens", 32, "tokens to generate for --prompt")
	fl.Float32Var(&d.temperature, "temperature", 0, "sampling temperature for --prompt (0: greedy)")
	fl.Uint64Var(&d.seed, "seed", 0, "sampling seed for --prompt")
}

func newNodeCmd() *cobra.Command {
	var demo demoFlags
	cmd := &cobra.Command{
		Use:   "node",
		Short: "run a Strata node: join (or found) a swarm and serve layers of a model",
		Long: `node starts a swarm member: a libp2p host with a persistent identity in
--data-dir, signed heartbeat gossip, the peer table, a Raft replica of the
swarm's layer map, the model's layers the leader gives it, and the
OpenAI-compatible HTTP API (--api, 127.0.0.1:8080 by default). It prints its
full multiaddrs (with /p2p/ID) at start; give one of them to other nodes as
--bootstrap. With no --bootstrap it founds a swarm, except in a public swarm.

A public swarm has a name of its own (--swarm NAME) and no swarm key. Its
members provide a key derived from the name and the model's fingerprint on
the public libp2p DHT (Amino; --dht-bootstrap names its bootstrap peers,
the public network's by default), so that a node started with --swarm NAME
and the model, and no --bootstrap, finds the swarm by name and joins it. The
first node of a public swarm founds it with --found (and should name
stewards, --stewards: docs/internet.md). Its peer ID is the swarm's identity:
--swarm-founder PEERID joins only the swarm that node founded (checked by its
signature), never a rival founded under the same name; without it a node
joins the one founder it finds, refuses when it finds members of several,
and remembers the founder in --data-dir, refusing another later.

--model serves a GGUF file with the real engine (a path, a name in the model
store, or an hf://… reference pulled into it if missing; see strata model
pull). A store name (OWNER/REPO:QUANT) the store lacks, with --bootstrap,
joins the model the bootstrap peers serve by its identity, as --model-id
does; the store notes the name's fingerprint (a later join checks it) and
strata model list shows the slices fetched. At the first start the node
measures one layer (cached in the data dir) to declare its speed, unless --gpu
declares a device. --model-id FINGERPRINT joins with the model's identity
only (strata model inspect prints it; the founder's log too): the node learns
the model from its --bootstrap peers, and fetches the layers it is placed on
from peers that hold the file, checked chunk by chunk, into a slice under
--data-dir (a restart fetches nothing). --upload-rate caps what a node with
the file sends to such peers; while it serves, the node also lowers that rate
itself so that its own steps stay within 10% of their idle time
(--upload-adaptive=false turns this off). --sim-model serves a built-in model SIMULATED on the --gpu
profile. --max-layers and --memory cap what the node offers.

Settings come from flags, then STRATA_* environment variables (STRATA_MAX_LAYERS
for --max-layers), then --config FILE.yaml (max_layers: ...), then defaults.

SIGTERM (or Ctrl-C) drains: the API refuses new requests, the node announces
draining, the leader moves its layers away, entries move their sessions at a
token boundary, and the node leaves. A second signal exits at once.

Without a model it runs the networking only and logs its peer table.`,
		Example: `  strata model gen --out /tmp/m.gguf --layers 8
  strata node --data-dir /tmp/n1 --listen /ip4/127.0.0.1/tcp/4001 --model /tmp/m.gguf --max-layers 4 --api 127.0.0.1:8081
  strata node --data-dir /tmp/n2 --listen /ip4/127.0.0.1/tcp/4002 --model /tmp/m.gguf --max-layers 4 --api 127.0.0.1:8082 \
      --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW... --prompt "Once upon a time"
  strata node --sim-model llama-3-70b:q8_0 --gpu a100-80g --memory 40GiB --log-json
  strata node --swarm my-swarm --model m.gguf --found --stewards 12D3KooWA...,12D3KooWB...,12D3KooWC...
  strata node --swarm my-swarm --model m.gguf
  strata node --swarm my-swarm --swarm-founder 12D3KooWF... --model m.gguf`,
		Args: cobra.NoArgs,
	}
	load := config.Bind(cmd)
	demo.register(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := load()
		if err != nil {
			return err
		}
		log, err := cfg.Logger()
		if err != nil {
			return err
		}
		defer log.Sync() //nolint:errcheck
		if cfg.Model != "" {
			path, err := resolveModel(cmd, cfg.Model)
			switch {
			case err == nil:
				cfg.Model = path
			case errors.Is(err, store.ErrNotFound) && joinableName(cfg.Model) && len(cfg.Bootstrap) > 0:
				// Not held: join by the model's identity and fetch the layers.
				fp, jerr := joinByName(cmd, cfg, log)
				if jerr != nil {
					return fmt.Errorf("--model %s: not in the model store, and joining by it failed: %w", cfg.Model, jerr)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "%s is not in the model store: joining the swarm's model %.16s and fetching the layers placed here into %s\n",
					cfg.Model, fp, filepath.Join(cfg.DataDir, "models"))
				cfg.Model, cfg.ModelID = "", fp
			default:
				return fmt.Errorf("--model: %w", err)
			}
		}
		// The first signal drains; the second (see runServingNode) exits.
		sigs := make(chan os.Signal, 2)
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(sigs)
		if !cfg.ServesModel() {
			opts, err := cfg.SwarmOptions(log)
			if err != nil {
				return err
			}
			ctx, stop := context.WithCancel(cmd.Context())
			defer stop()
			go func() { <-sigs; stop() }()
			return runNode(ctx, cmd, log, cfg.LogPeers, opts)
		}
		opts, err := cfg.NodeOptions(log)
		if err != nil {
			return err
		}
		if cfg.SimModel == "" {
			eng, err := nodeEngine(cfg.Engine, cfg.GGMLLibDir)
			if err != nil {
				return err
			}
			if eng != nil {
				opts = append(opts, node.WithEngine(*eng))
				log.Info("engine", zap.String("engine", eng.Name), zap.Int64("device_memory", eng.Memory))
			} else {
				log.Info("engine", zap.String("engine", "go"))
			}
		}
		fault, err := faultOptions()
		if err != nil {
			return err
		}
		return runServingNode(cmd, log, cfg, demo, append(opts, fault...), sigs)
	}
	return cmd
}

// runServingNode runs a node that serves a model (and its API) until a
// signal: the first drains, a second exits at once.
func runServingNode(cmd *cobra.Command, log *zap.Logger, cfg config.Config, demo demoFlags, opts []node.Option, sigs <-chan os.Signal) error {
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	sctx, scancel := context.WithTimeout(ctx, 2*time.Minute)
	n, err := node.New(sctx, opts...)
	scancel()
	if err != nil {
		return err
	}
	defer n.Close()
	out := cmd.OutOrStdout()
	info := n.Model()
	fmt.Fprintf(out, "peer ID %s\n", n.ID())
	if info.Simulated {
		fmt.Fprintf(out, "model %s (SIMULATED on %s), %d layers\n", info.Name, n.Swarm().Hardware.Name, info.Layers)
	} else {
		fmt.Fprintf(out, "model %s, %d layers, fingerprint %s\n", info.Name, info.Layers, info.Fingerprint)
	}
	printed := printAddrs(out, n.Swarm().Addrs, "")
	var srv *api.Server
	if cfg.APIEnabled() {
		aopts, err := cfg.APIOptions(log)
		if err != nil {
			return err
		}
		if srv, err = api.New(api.NodeBackend(n), aopts...); err != nil {
			return err
		}
		defer srv.Close()
		addr, err := srv.Start(cfg.API)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "API on http://%s/v1\n", addr)
	}
	var tick <-chan time.Time
	if cfg.LogPeers > 0 {
		t := time.NewTicker(cfg.LogPeers)
		defer t.Stop()
		tick = t.C
	}
	prompted := demo.prompt == ""
	ready := time.NewTicker(200 * time.Millisecond)
	defer ready.Stop()
	var epoch uint64
	for {
		select {
		case <-sigs:
			return drain(log, n, srv, sigs)
		case <-ctx.Done():
			log.Info("shutting down")
			return nil
		case <-ready.C:
			if m := n.Committed(); m.Epoch != epoch {
				epoch = m.Epoch
				r, _ := m.Range(n.ID().String())
				log.Info("committed map", zap.Uint64("epoch", m.Epoch), zap.Stringer("serving", r), zap.Any("stages", m.Stages))
			}
			if !prompted && n.Swarm().RouteErr == nil {
				prompted = true
				go promptOnce(ctx, out, log, n, demo)
			}
		case <-tick:
			snap := n.Swarm()
			printed = printAddrs(out, snap.Addrs, printed)
			logPeerTable(log, snap.Peers)
			m := n.Metrics()
			log.Info("load", zap.Int("sessions", m.Sessions), zap.Int("queue", m.Queue), zap.Int64("free_kv", m.FreeKV),
				zap.Duration("layer_latency", m.LayerLatency), zap.Uint64("requests", m.Requests), zap.Uint64("replays", m.Replays))
		}
	}
}

// drainTimeout bounds a graceful drain; a second signal cuts it short.
const drainTimeout = 2 * time.Minute

// drain takes the node out of the swarm without failing a request: the
// API refuses new ones, the node drains (the leader moves its layers,
// entries move their sessions), the API's own streams finish, then the
// API and the node close. A second signal ends it at once.
func drain(log *zap.Logger, n *node.Node, srv *api.Server, sigs <-chan os.Signal) error {
	log.Info("draining (signal again to exit at once)")
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	go func() {
		select {
		case <-sigs:
			log.Warn("second signal: exiting now")
			cancel()
			if srv != nil {
				srv.Close()
			}
		case <-ctx.Done():
		}
	}()
	if srv != nil {
		srv.Drain()
	}
	err := n.Drain(ctx)
	if srv != nil {
		if werr := srv.WaitIdle(ctx); err == nil {
			err = werr
		}
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		srv.Shutdown(sctx) //nolint:errcheck // the node closes next either way
		scancel()
	}
	if err != nil {
		log.Warn("drain cut short", zap.Error(err))
		return nil
	}
	log.Info("drained; leaving")
	return nil
}

// promptOnce drives one generation through the swarm and prints it.
func promptOnce(ctx context.Context, out io.Writer, log *zap.Logger, n *node.Node, d demoFlags) {
	s, err := n.Generate(ctx, node.Request{Prompt: d.prompt, MaxTokens: d.maxTokens,
		Sampling: engine.SamplingParams{Temperature: d.temperature, Seed: d.seed}})
	if err != nil {
		log.Error("generate", zap.Error(err))
		return
	}
	var b strings.Builder
	for {
		d, err := s.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				log.Error("generate", zap.Error(err))
			}
			break
		}
		b.WriteString(d.Text)
	}
	res, _ := s.Result()
	fmt.Fprintf(out, "%s\n", b.String())
	log.Info("generated", zap.Int("tokens", len(res.Tokens)), zap.Duration("ttft", res.TTFT), zap.Duration("total", res.Total),
		zap.Int("replays", res.Replays), zap.Strings("paths", res.Paths))
}

func runNode(ctx context.Context, cmd *cobra.Command, log *zap.Logger, logPeers time.Duration, opts []swarm.Option) error {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	h, err := swarm.New(sctx, opts...)
	cancel()
	if err != nil {
		return err
	}
	defer h.Close()
	if err := h.Beats().SetStatus(swarm.Status{State: swarm.StateJoining, FreeKV: -1}); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "peer ID %s\n", h.ID())
	printed := printAddrs(out, h.Addrs(), "")

	events, stopWatch := h.Peers().Watch(256)
	defer stopWatch()
	var tick <-chan time.Time
	if logPeers > 0 {
		t := time.NewTicker(logPeers)
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
			printed = printAddrs(out, h.Addrs(), printed)
			logPeerTable(log, h.Peers().Snapshot())
		}
	}
}

// printAddrs prints the host's full multiaddrs when they differ from the
// last ones printed (a relayed node gets its addresses after start).
func printAddrs(out io.Writer, addrs []ma.Multiaddr, last string) string {
	var b strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&b, "listening on %s\n", a)
	}
	if s := b.String(); s != last {
		fmt.Fprint(out, s)
		return s
	}
	return last
}

func logPeerTable(log *zap.Logger, peers []swarm.Peer) {
	alive := 0
	for _, p := range peers {
		if p.Liveness == swarm.Alive {
			alive++
		}
	}
	log.Info("peer table", zap.Int("rows", len(peers)), zap.Int("alive", alive))
	for _, p := range peers {
		fields := []zap.Field{
			zap.Stringer("peer", p.ID),
			zap.Stringer("liveness", p.Liveness),
			zap.Bool("connected", p.Connected),
			zap.Bool("relayed", p.Relayed),
			zap.String("link", string(p.Link)),
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

// faultEnv names the test builds' fault injection (fault_faultinject.go).
const faultEnv = "STRATA_FAULT_INJECT"
