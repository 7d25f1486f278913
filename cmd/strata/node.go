package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/node"
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
	opts, err := f.networkOptions()
	if err != nil {
		return nil, err
	}
	return append(opts, swarm.WithLogger(log), swarm.WithDataDir(f.dataDir), swarm.WithBootstrap(f.bootstrap...)), nil
}

// networkOptions are the swarm options a node passes on to its host (it
// sets the logger, data dir, bootstrap peers and model scope itself).
func (f *swarmFlags) networkOptions() ([]swarm.Option, error) {
	opts := []swarm.Option{
		swarm.WithRelayService(f.relay),
		swarm.WithSwarmName(f.swarmName),
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

func newLogger(level string, json bool) (*zap.Logger, error) {
	l, err := node.NewLogger(level, json)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return l, nil
}

// nodeFlags are what the node serves and how.
type nodeFlags struct {
	model, simModel, gpu string
	memory               string
	maxLayers, threads   int
	region               string
	logJSON              bool
	prompt               string
	maxTokens            int
	temperature          float32
	seed                 uint64
}

func (f *nodeFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "GGUF model file to serve with the real engine")
	fl.StringVar(&f.simModel, "sim-model", "", "built-in model to serve SIMULATED (see strata plan's models), with --gpu")
	fl.StringVar(&f.gpu, "gpu", "", "device profile: required with --sim-model; with --model it declares the device instead of measuring it")
	fl.StringVar(&f.memory, "memory", "", "memory the node may use for weights and KV cache, such as 24GiB (default: the device's; real engine: half the machine's)")
	fl.IntVar(&f.maxLayers, "max-layers", 0, "most layers the node offers (0: as many as memory allows)")
	fl.IntVar(&f.threads, "threads", 0, "goroutines per engine step (0: all cores)")
	fl.StringVar(&f.region, "region", "", "coarse location label announced in heartbeats")
	fl.BoolVar(&f.logJSON, "log-json", false, "log one JSON object per line instead of human-readable lines")
	fl.StringVar(&f.prompt, "prompt", "", "once the swarm can serve, generate from this prompt through it, print the text, and keep serving")
	fl.IntVar(&f.maxTokens, "max-tokens", 32, "tokens to generate for --prompt")
	fl.Float32Var(&f.temperature, "temperature", 0, "sampling temperature for --prompt (0: greedy)")
	fl.Uint64Var(&f.seed, "seed", 0, "sampling seed for --prompt")
}

// parseBytes reads a byte count: an integer with an optional suffix
// (KB, MB, GB, TB in powers of 1000; KiB, MiB, GiB, TiB in powers of 1024).
func parseBytes(in string) (int64, error) {
	s := strings.TrimSpace(in)
	if s == "" {
		return 0, nil
	}
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(strings.ToLower(s), strings.ToLower(u.suffix)) {
			s, mult = strings.TrimSpace(s[:len(s)-len(u.suffix)]), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || v*mult > math.MaxInt64 {
		return 0, fmt.Errorf("--memory %q: want a byte count such as 24GiB", in)
	}
	return int64(v * mult), nil
}

// options turns the flags into node options.
func (f *nodeFlags) options(sf swarmFlags, log *zap.Logger) ([]node.Option, error) {
	if (f.model == "") == (f.simModel == "") {
		return nil, errors.New("give one of --model FILE and --sim-model NAME")
	}
	opts := []node.Option{node.WithLogger(log), node.WithDataDir(sf.dataDir), node.WithMaxLayers(f.maxLayers),
		node.WithRegion(f.region), node.WithThreads(f.threads)}
	mem, err := parseBytes(f.memory)
	if err != nil {
		return nil, err
	}
	opts = append(opts, node.WithMemory(mem))
	var hw layers.Hardware
	if f.gpu != "" {
		if hw, err = layers.Device(f.gpu); err != nil {
			return nil, fmt.Errorf("--gpu: %w", err)
		}
	}
	switch {
	case f.simModel != "":
		if f.gpu == "" {
			return nil, errors.New("--sim-model needs --gpu PROFILE")
		}
		opts = append(opts, node.WithSimModel(f.simModel, hw))
	default:
		opts = append(opts, node.WithModelFile(f.model))
		if f.gpu != "" {
			opts = append(opts, node.WithHardware(hw))
		}
	}
	var boot []peer.AddrInfo
	for _, a := range sf.bootstrap {
		ai, err := peer.AddrInfoFromString(a)
		if err != nil {
			return nil, fmt.Errorf("--bootstrap %q: %w", a, err)
		}
		boot = append(boot, *ai)
	}
	sopts, err := sf.networkOptions()
	if err != nil {
		return nil, err
	}
	return append(opts, node.WithBootstrap(boot...), node.WithSwarmOptions(sopts...)), nil
}

func newNodeCmd() *cobra.Command {
	var f swarmFlags
	var nf nodeFlags
	cmd := &cobra.Command{
		Use:   "node",
		Short: "run a Strata node: join (or found) a swarm and serve layers of a model",
		Long: `node starts a swarm member: a libp2p host with a persistent identity in
--data-dir, signed heartbeat gossip, the peer table, a Raft replica of the
swarm's layer map, and the model's layers the leader gives it. It prints its
full multiaddrs (with /p2p/ID) at start; give one of them to other nodes as
--bootstrap. With no --bootstrap it founds a swarm.

--model serves a GGUF file with the real engine: at the first start the node
measures one layer (cached in the data dir) to declare its speed, unless --gpu
declares a device. --sim-model serves a built-in model SIMULATED on the --gpu
profile. --max-layers and --memory cap what the node offers.

Without a model it runs the networking only and logs its peer table.`,
		Example: `  strata model gen --out /tmp/m.gguf --layers 8
  strata node --data-dir /tmp/n1 --listen /ip4/127.0.0.1/tcp/4001 --model /tmp/m.gguf --max-layers 4
  strata node --data-dir /tmp/n2 --listen /ip4/127.0.0.1/tcp/4002 --model /tmp/m.gguf --max-layers 4 \
      --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW... --prompt "Once upon a time"
  strata node --sim-model llama-3-70b:q8_0 --gpu a100-80g --memory 40GiB --log-json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(f.logLevel, nf.logJSON)
			if err != nil {
				return err
			}
			defer log.Sync() //nolint:errcheck
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if nf.model == "" && nf.simModel == "" {
				opts, err := f.options(log)
				if err != nil {
					return err
				}
				return runNode(ctx, cmd, log, f, opts)
			}
			opts, err := nf.options(f, log)
			if err != nil {
				return err
			}
			return runServingNode(ctx, cmd, log, f, nf, opts)
		},
	}
	f.register(cmd)
	nf.register(cmd)
	return cmd
}

// runServingNode runs a node that serves a model until ctx ends.
func runServingNode(ctx context.Context, cmd *cobra.Command, log *zap.Logger, f swarmFlags, nf nodeFlags, opts []node.Option) error {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	n, err := node.New(sctx, opts...)
	cancel()
	if err != nil {
		return err
	}
	defer n.Close()
	out := cmd.OutOrStdout()
	info := n.Model()
	fmt.Fprintf(out, "peer ID %s\n", n.ID())
	if info.Simulated {
		fmt.Fprintf(out, "model %s (SIMULATED on %s), %d layers\n", info.Name, n.Hardware().Name, info.Layers)
	} else {
		fmt.Fprintf(out, "model %s, %d layers, fingerprint %s\n", info.Name, info.Layers, info.Fingerprint)
	}
	printed := printAddrs(out, n.Host(), "")
	var tick <-chan time.Time
	if f.tableEvery > 0 {
		t := time.NewTicker(f.tableEvery)
		defer t.Stop()
		tick = t.C
	}
	prompted := nf.prompt == ""
	ready := time.NewTicker(200 * time.Millisecond)
	defer ready.Stop()
	var epoch uint64
	for {
		select {
		case <-ctx.Done():
			log.Info("shutting down")
			return nil
		case <-ready.C:
			if m := n.Committed(); m.Epoch != epoch {
				epoch = m.Epoch
				r, _ := m.Range(n.ID().String())
				log.Info("committed map", zap.Uint64("epoch", m.Epoch), zap.Stringer("serving", r), zap.Any("stages", m.Stages))
			}
			if !prompted && n.Ready() == nil {
				prompted = true
				go promptOnce(ctx, out, log, n, nf)
			}
		case <-tick:
			printed = printAddrs(out, n.Host(), printed)
			logPeerTable(log, n.Host())
			m := n.Metrics()
			log.Info("load", zap.Int("sessions", m.Sessions), zap.Int("queue", m.Queue), zap.Int64("free_kv", m.FreeKV),
				zap.Duration("layer_latency", m.LayerLatency), zap.Uint64("requests", m.Requests), zap.Uint64("replays", m.Replays))
		}
	}
}

// promptOnce drives one generation through the swarm and prints it.
func promptOnce(ctx context.Context, out io.Writer, log *zap.Logger, n *node.Node, nf nodeFlags) {
	s, err := n.Generate(ctx, node.Request{Prompt: nf.prompt, MaxTokens: nf.maxTokens,
		Sampling: engine.SamplingParams{Temperature: nf.temperature, Seed: nf.seed}})
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
