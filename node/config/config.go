// Package config is the configuration of `strata node`: one struct for
// every setting a node reads at start, loaded from defaults, a YAML file,
// STRATA_* environment variables and command-line flags, validated with
// errors that name the bad field where the user wrote it, and turned into
// the options of packages node, swarm and node/api.
//
// # Precedence
//
// Highest first:
//
//  1. flags given on the command line (--max-layers 4);
//  2. environment variables: STRATA_ and the key in upper case
//     (STRATA_MAX_LAYERS=4; lists comma-separated, as for flags);
//  3. the YAML file named by --config or STRATA_CONFIG (max_layers: 4);
//  4. the defaults.
//
// A setting takes the value of the highest source that gives it; lists are
// replaced, never merged. Every key has the three spellings: key
// "max_layers", flag "--max-layers", variable "STRATA_MAX_LAYERS".
//
// # Errors
//
// Unknown YAML keys are errors (a typo must not silently leave a default
// in place). A bad value's error says where it came from: "--api", or
// "STRATA_API", or "node.yaml:7: api". Every error wraps ErrInvalid.
//
// # Wiring into a command
//
// Bind replaces hand-written flag registration (it registers every flag
// above, so the command must not register them again); flags that are
// not configuration (strata node's --prompt demo) stay the command's own:
//
//	load := config.Bind(cmd)
//	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
//		cfg, err := load()
//		if err != nil {
//			return err
//		}
//		log, err := cfg.Logger()
//		...
//		if !cfg.ServesModel() {
//			opts, err := cfg.SwarmOptions(log) // networking only
//			...
//		}
//		opts, err := cfg.NodeOptions(log)
//		n, err := node.New(ctx, opts...)
//		...
//		if cfg.APIEnabled() {
//			aopts, err := cfg.APIOptions(log)
//			srv, err := api.New(api.NodeBackend(n), aopts...)
//			addr, err := srv.Start(cfg.API)
//			...
//		}
//	}
//
// The package holds no node behaviour: it only reads, checks and
// translates settings.
package config

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/stratanet/strata/node"
	"github.com/stratanet/strata/swarm"
)

// Config is every setting of a node. The yaml tag is the key; help is the
// flag's usage.
type Config struct {
	// Swarm.
	DataDir   string   `yaml:"data_dir" help:"directory for the node's identity key, Raft state and measured capabilities"`
	Listen    []string `yaml:"listen" help:"listen multiaddrs (QUIC ones are dropped under a swarm key); \"none\": reachable only through relays"`
	Bootstrap []string `yaml:"bootstrap" help:"full multiaddrs (with /p2p/ID) of peers to join through, or a list a swarm publishes in DNS (/dnsaddr/NAME: the dnsaddr TXT records of _dnsaddr.NAME); none founds a swarm (a public one is found by name)"`
	SwarmKey  string   `yaml:"swarm_key" help:"pre-shared swarm key file for a private swarm (see strata swarm-key gen)"`
	Relay     bool     `yaml:"relay" help:"act as a circuit relay for unreachable peers when publicly reachable"`
	RelayRate ByteSize `yaml:"relay_rate" help:"bytes per second a relay carries for others, all circuits together, such as 25MiB (0: no cap)"`
	Swarm     string   `yaml:"swarm" help:"swarm name: scopes gossip topics and the rendezvous key; a name of its own (not default) without a swarm key makes the swarm public, found by name through the public DHT (docs/internet.md)"`
	// DHTBootstrap are the public (Amino) DHT's bootstrap peers a public
	// swarm is found through; Found founds a public swarm instead of
	// looking it up.
	DHTBootstrap []string      `yaml:"dht_bootstrap" help:"bootstrap peers of the public (Amino) DHT that a public swarm (--swarm NAME, no swarm key) is found by name through: full multiaddrs with /p2p/ID, /dnsaddr/... included (default: the public network's well-known ones; \"none\": no public DHT)"`
	SwarmFounder string        `yaml:"swarm_founder" help:"peer ID of the public swarm's founder: join only members of the swarm it founded (its signed charter), never a rival founded under the same name; without it a node joins the one founder it finds and remembers it in data_dir (docs/internet.md)"`
	Found        bool          `yaml:"found" help:"found the public swarm --swarm NAME instead of finding it by name on the public DHT (a node without bootstrap; with Raft state in data_dir a node resumes either way)"`
	Reachability string        `yaml:"reachability" help:"auto (AutoNAT decides), public (serve as relay) or private (reserve relay slots)"`
	NATPortMap   bool          `yaml:"nat_portmap" help:"ask the router for a port mapping (UPnP / NAT-PMP)"`
	Heartbeat    time.Duration `yaml:"heartbeat" help:"heartbeat interval"`

	// What the node serves.
	Model     string   `yaml:"model" help:"model to serve with the real engine: a GGUF file, a model store name (strata model list) or an hf://… or https:// reference (pulled into the store if missing)"`
	SimModel  string   `yaml:"sim_model" help:"built-in model to serve SIMULATED (see strata plan's models), with --gpu"`
	GPU       string   `yaml:"gpu" help:"device profile: required with --sim-model; with --model it declares the device instead of measuring it"`
	Memory    ByteSize `yaml:"memory" help:"memory the node may use for weights and KV cache, such as 24GiB (0: the device's; real engine: half the machine's)"`
	MaxLayers int      `yaml:"max_layers" help:"most layers the node offers (0: as many as memory allows)"`
	Threads   int      `yaml:"threads" help:"goroutines per engine step (0: all cores)"`
	// Engine computes the layers: "go" (the pure-Go engine, the default
	// and the reference), "ggml" or "auto" (ggml where this binary has it
	// and a GPU is present, else go); only a ggml build (make build-ggml)
	// has ggml.
	Engine     string `yaml:"engine" help:"engine computing the layers: go (pure Go, bit-reproducible), ggml (GPU if found, else CPU; only in binaries built with make build-ggml) or auto (ggml where this binary has it and finds a GPU, else go)"`
	GGMLLibDir string `yaml:"ggml_lib_dir" help:"directory of ggml's GPU backend libraries (libggml-cuda.so and the like, as make build-cuda writes them) for the ggml engine; empty: the CPU, and Metal where built in"`
	Region     string `yaml:"region" help:"coarse location label announced in heartbeats"`
	// VerifyRate is the entry's own spot-check rate, overriding the
	// swarm's (-1: follow the swarm's); SwarmVerifyRate the rate a
	// founder gives the swarm (docs/trust.md).
	VerifyRate      float64 `yaml:"verify_rate" help:"this node's own spot-check rate, overriding the swarm's: the share of token boundaries at which its entry re-checks one hop on a second holder of its layers, 0 to 1 (0: off; -1: follow the swarm's replicated rate)"`
	SwarmVerifyRate float64 `yaml:"swarm_verify_rate" help:"the verify rate this node commits to the swarm's replicated config when it founds the swarm, 0 to 1 (change it later with strata swarm set verify-rate)"`
	// PlanSessionTokens is the planner's mean session length a founder
	// gives the swarm (0: none, no KV cap).
	PlanSessionTokens int `yaml:"plan_session_tokens" help:"the mean session length, prompt plus output tokens, this node commits to the swarm's replicated config when it founds the swarm: the leader's planner then caps each node by the sessions of that length its KV memory holds (0: none, no such cap; at most 1048576; change it later with strata swarm set plan-session-tokens)"`
	// Stewards are the peer IDs a founder signs into the swarm as its
	// only voters (consensus/stewards.go, docs/internet.md).
	Stewards []string `yaml:"stewards" help:"peer IDs this node, founding the swarm, signs into its replicated state as stewards: then only stewards vote in Raft, and other nodes serve layers and route as non-voters (docs/internet.md); ignored on a node that did not found the swarm"`
	// TrustChecks is K: the spot checks after which a member counts
	// fully in placement, when this node leads a swarm with stewards.
	TrustChecks int `yaml:"trust_checks" help:"in a swarm with stewards, the spot checks a member must pass (counted by stewards; others' count at most half) before its capacity counts fully in placement and it may hold layers alone, when this node leads (0: the default, 8; docs/internet.md)"`

	// Weights from peers: ModelID joins without the file; UploadRate caps
	// what a node with the file (or a fetched slice) sends to peers
	// fetching from it.
	ModelID    string   `yaml:"model_id" help:"fingerprint of the swarm's model, to join without its file: the node fetches the layers it is placed on from peers that hold the file (needs bootstrap)"`
	UploadRate ByteSize `yaml:"upload_rate" help:"bytes per second the node sends to peers fetching the model's chunks from it, such as 50MiB (0: no cap)"`
	// UploadAdaptive lowers uploads below UploadRate while the node's
	// inference runs slower than idle with them (node.WithAdaptiveUpload).
	UploadAdaptive bool `yaml:"upload_adaptive" help:"while serving, limit uploads to fetching peers so that the node's step time stays within 10% of its idle figure (floor 1 MB/s; upload_rate stays the cap)"`
	// SchedulerConfig is a YAML file of routing profiles (see
	// routing.SchedulerConfig); empty: one default profile.
	SchedulerConfig string `yaml:"scheduler_config" help:"YAML file of scheduling profiles (filters, weighted scorers, picker) a request picks by name; empty: one default profile"`
	// The entry's admission queue.
	QueueTimeout  time.Duration `yaml:"queue_timeout" help:"how long a request may wait in this entry's queue for a path with KV room before a 503 (a request's queue_timeout overrides it)"`
	QueueMax      int           `yaml:"queue_max" help:"requests this entry's queue holds; past it a request gets 503 at once"`
	Steal         bool          `yaml:"steal" help:"steal requests queued at a loaded peer's entry when this node's entry has spare path capacity; the tokens go back to the client through that entry"`
	FairAdmission bool          `yaml:"fair_admission" help:"swarm-wide oldest-first admission: hold this entry's queued and new requests while a peer entry's queue head, by the load table, was queued earlier"`
	// Wire is how hidden states travel to this node's next hops.
	Wire        string `yaml:"wire" help:"hidden states sent to next hops as f32 (bit-identical with one process), f16, q8 (8-bit blocks, 3.6x smaller than f32), or auto: per link from its measured bandwidth (q8 under 100 Mbit/s, f16 under 1 Gbit/s, f32 above or unmeasured); see docs/internet.md"`
	PrefixCache bool   `yaml:"prefix_cache" help:"keep finished sessions' KV in the memory sessions leave free, so that a chat's next turn resumes from it (outputs unchanged)"`

	// The HTTP API.
	API        string   `yaml:"api" help:"HTTP API address, host:port (\"none\": no API)"`
	APIKeyFile string   `yaml:"api_key_file" help:"file holding the API key; requests must then send Authorization: Bearer <key>"`
	APIMaxBody ByteSize `yaml:"api_max_body" help:"largest request body the API accepts"`

	// Logs.
	LogLevel string        `yaml:"log_level" help:"log level: debug, info, warn, error"`
	LogJSON  bool          `yaml:"log_json" help:"log one JSON object per line instead of human-readable lines"`
	LogPeers time.Duration `yaml:"log_peers" help:"how often to log the peer table (0: never)"`
}

// DefaultAPI is the API address of a node that names none: loopback
// only, so that a node does not open its API to the network unasked.
const DefaultAPI = "127.0.0.1:8080"

// Default returns the defaults.
func Default() Config {
	return Config{
		DataDir:         defaultDataDir(),
		Listen:          append([]string(nil), swarm.DefaultListenAddrs...),
		Relay:           true,
		RelayRate:       swarm.DefaultRelayRate,
		Swarm:           swarm.DefaultSwarmName,
		DHTBootstrap:    swarm.DefaultPublicBootstrap(),
		Reachability:    "auto",
		Heartbeat:       swarm.DefaultHeartbeatInterval,
		QueueTimeout:    node.DefaultQueueTimeout,
		QueueMax:        node.DefaultEntryQueueMax,
		API:             DefaultAPI,
		APIMaxBody:      4 << 20,
		LogLevel:        "info",
		Engine:          "go",
		LogPeers:        5 * time.Second,
		VerifyRate:      -1,
		SwarmVerifyRate: node.DefaultVerifyRate,
		PrefixCache:     true,
		Wire:            string(node.WireF32),
		UploadAdaptive:  true,
		FairAdmission:   true,
	}
}

func defaultDataDir() string {
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".strata")
	}
	return ".strata"
}

// ServesModel reports whether the node serves a model; without one it
// runs the networking only.
func (c Config) ServesModel() bool { return c.Model != "" || c.SimModel != "" || c.ModelID != "" }

// PublicSwarm reports whether the node's swarm is public, found by name
// through the public DHT: a name of its own, no swarm key, and a public
// DHT to use.
func (c Config) PublicSwarm() bool {
	return c.Swarm != swarm.DefaultSwarmName && c.SwarmKey == "" && !(len(c.DHTBootstrap) == 1 && c.DHTBootstrap[0] == "none") && len(c.DHTBootstrap) > 0
}

// APIEnabled reports whether the node serves the HTTP API.
func (c Config) APIEnabled() bool { return c.API != "" && c.API != "none" }

// ByteSize is a byte count: an integer with an optional unit (B; KB, MB,
// GB, TB in powers of 1000; KiB, MiB, GiB, TiB in powers of 1024). It is
// a flag value and a YAML scalar (a number or such a string).
type ByteSize int64

// ParseByteSize reads a byte count such as "24GiB", "1.5GB" or "4096".
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, nil
	}
	units := []struct {
		suffix string
		mult   float64
	}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
		{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12}, {"b", 1}}
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(strings.ToLower(t), u.suffix) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || v < 0 || v*mult > math.MaxInt64 {
		return 0, fmt.Errorf("%q is not a byte count such as 24GiB", s)
	}
	return ByteSize(v * mult), nil
}

// String writes the size in the largest binary unit that divides it.
func (b ByteSize) String() string {
	for _, u := range []struct {
		name string
		size ByteSize
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && b%u.size == 0 {
			return strconv.FormatInt(int64(b/u.size), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// Set implements pflag.Value.
func (b *ByteSize) Set(s string) error {
	v, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// Type implements pflag.Value.
func (b *ByteSize) Type() string { return "bytes" }

// UnmarshalYAML reads a number or a string with a unit.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	// A TypeError, so that the decoder reports it with its line, beside
	// the file's other errors, rather than stopping at it.
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a byte count such as 24GiB", n.Line)}}
	}
	if err := b.Set(n.Value); err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	return nil
}

// MarshalYAML writes the String form.
func (b ByteSize) MarshalYAML() (any, error) { return b.String(), nil }
