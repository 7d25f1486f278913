package config

import (
	"fmt"
	"io"
	"os"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/node"
	"github.com/stratanet/strata/node/api"
	"github.com/stratanet/strata/routing"
	"github.com/stratanet/strata/swarm"
)

// The translation of a validated Config into the options of the packages
// it configures. Nothing here decides anything the packages do not.

// Logger builds the node's logger (node.NewLogger).
func (c Config) Logger() (*zap.Logger, error) {
	l, err := node.NewLogger(c.LogLevel, c.LogJSON)
	if err != nil {
		return nil, fmt.Errorf("%w: log_level: %w", ErrInvalid, err)
	}
	return l, nil
}

// networkOptions are the swarm options a serving node passes on to its
// host; the node sets the logger, data dir, bootstrap peers and model
// scope itself.
func (c Config) networkOptions() ([]swarm.Option, error) {
	opts := []swarm.Option{
		swarm.WithRelayService(c.Relay),
		swarm.WithRelayRate(float64(c.RelayRate)),
		swarm.WithSwarmName(c.Swarm),
		swarm.WithNATPortMap(c.NATPortMap),
		swarm.WithHeartbeatInterval(c.Heartbeat),
	}
	switch c.Reachability {
	case "auto":
	case "public":
		opts = append(opts, swarm.WithReachability(swarm.ReachabilityPublic))
	case "private":
		opts = append(opts, swarm.WithReachability(swarm.ReachabilityPrivate))
	default:
		return nil, &FieldError{Key: "reachability", Msg: fmt.Sprintf("%q: want auto, public or private", c.Reachability)}
	}
	if len(c.Listen) == 1 && c.Listen[0] == "none" {
		opts = append(opts, swarm.WithNoListen())
	} else {
		opts = append(opts, swarm.WithListenAddrs(c.Listen...))
	}
	if c.PublicSwarm() {
		boot := make([]peer.AddrInfo, 0, len(c.DHTBootstrap))
		for _, a := range c.DHTBootstrap {
			ai, err := peer.AddrInfoFromString(a)
			if err != nil {
				return nil, &FieldError{Key: "dht_bootstrap", Msg: fmt.Sprintf("%q: %v", a, err)}
			}
			boot = append(boot, *ai)
		}
		opts = append(opts, swarm.WithPublicDHT(boot...))
		if c.SwarmFounder != "" {
			id, err := peer.Decode(c.SwarmFounder)
			if err != nil {
				return nil, &FieldError{Key: "swarm_founder", Msg: fmt.Sprintf("%q: %v", c.SwarmFounder, err)}
			}
			opts = append(opts, swarm.WithPinnedFounder(id))
		}
	}
	if c.SwarmKey != "" {
		psk, err := swarm.LoadSwarmKey(c.SwarmKey)
		if err != nil {
			return nil, &FieldError{Key: "swarm_key", Msg: err.Error()}
		}
		opts = append(opts, swarm.WithSwarmKey(psk))
	}
	return opts, nil
}

// SwarmOptions are the options of a networking-only node's host (no
// model served).
func (c Config) SwarmOptions(log *zap.Logger) ([]swarm.Option, error) {
	opts, err := c.networkOptions()
	if err != nil {
		return nil, err
	}
	return append(opts, swarm.WithLogger(log), swarm.WithDataDir(c.DataDir), swarm.WithBootstrap(c.Bootstrap...)), nil
}

// NodeOptions are the options of node.New for a node that serves a
// model.
func (c Config) NodeOptions(log *zap.Logger) ([]node.Option, error) {
	if !c.ServesModel() {
		return nil, &FieldError{Key: "model", Msg: "give one of model (a GGUF file), model_id and sim_model"}
	}
	opts := []node.Option{node.WithLogger(log), node.WithDataDir(c.DataDir), node.WithMaxLayers(c.MaxLayers),
		node.WithRegion(c.Region), node.WithThreads(c.Threads), node.WithMemory(int64(c.Memory)),
		node.WithEntryQueue(c.QueueMax, c.QueueTimeout), node.WithVerifyRate(c.VerifyRate),
		node.WithSwarmVerifyRate(c.SwarmVerifyRate), node.WithPlanSessionTokens(c.PlanSessionTokens),
		node.WithStewards(c.Stewards...), node.WithFounding(c.Found), node.WithTrustChecks(c.TrustChecks),
		node.WithUploadRate(int64(c.UploadRate)), node.WithAdaptiveUpload(c.UploadAdaptive),
		node.WithPrefixCache(c.PrefixCache), node.WithWire(node.WireMode(c.Wire)), node.WithStealing(c.Steal), node.WithFairAdmission(c.FairAdmission)}
	var hw layers.Hardware
	if c.GPU != "" {
		var err error
		if hw, err = layers.Device(c.GPU); err != nil {
			return nil, &FieldError{Key: "gpu", Msg: err.Error()}
		}
	}
	switch {
	case c.SimModel != "":
		if c.GPU == "" {
			return nil, &FieldError{Key: "sim_model", Msg: "a simulated model needs a device: set gpu"}
		}
		opts = append(opts, node.WithSimModel(c.SimModel, hw))
	case c.ModelID != "":
		opts = append(opts, node.WithModelID(c.ModelID))
		if c.GPU != "" {
			opts = append(opts, node.WithHardware(hw))
		}
	default:
		opts = append(opts, node.WithModelFile(c.Model))
		if c.GPU != "" {
			opts = append(opts, node.WithHardware(hw))
		}
	}
	if c.SchedulerConfig != "" {
		sc, err := LoadSchedulerConfig(c.SchedulerConfig)
		if err != nil {
			return nil, &FieldError{Key: "scheduler_config", Msg: err.Error()}
		}
		opts = append(opts, node.WithSchedulerConfig(sc))
	}
	boot := make([]peer.AddrInfo, 0, len(c.Bootstrap))
	var lists []string
	for _, a := range c.Bootstrap {
		if swarm.IsBootstrapList(a) {
			lists = append(lists, a) // resolved by the host at start
			continue
		}
		ai, err := peer.AddrInfoFromString(a)
		if err != nil {
			return nil, &FieldError{Key: "bootstrap", Msg: fmt.Sprintf("%q: %v", a, err)}
		}
		boot = append(boot, *ai)
	}
	sopts, err := c.networkOptions()
	if err != nil {
		return nil, err
	}
	if len(lists) > 0 {
		sopts = append(sopts, swarm.WithBootstrap(lists...))
	}
	return append(opts, node.WithBootstrap(boot...), node.WithSwarmOptions(sopts...)), nil
}

// APIOptions are the options of api.New.
func (c Config) APIOptions(log *zap.Logger) ([]api.Option, error) {
	opts := []api.Option{api.WithLogger(log.Named("api")), api.WithMaxBodyBytes(int64(c.APIMaxBody))}
	if c.APIKeyFile != "" {
		key, err := api.ReadKeyFile(c.APIKeyFile)
		if err != nil {
			return nil, &FieldError{Key: "api_key_file", Msg: err.Error()}
		}
		opts = append(opts, api.WithAPIKey(key))
	}
	return opts, nil
}

// LoadSchedulerConfig reads and validates a scheduling configuration file
// (routing.ParseSchedulerConfig); its errors name the file and the field.
func LoadSchedulerConfig(path string) (routing.SchedulerConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return routing.SchedulerConfig{}, err
	}
	defer f.Close()
	// One byte past the cap, so that the parser sees the file is too big.
	data, err := io.ReadAll(io.LimitReader(f, routing.MaxConfigBytes+1))
	if err != nil {
		return routing.SchedulerConfig{}, fmt.Errorf("%s: %w", path, err)
	}
	sc, err := routing.ParseSchedulerConfig(data)
	if err != nil {
		return routing.SchedulerConfig{}, fmt.Errorf("%s: %w", path, err)
	}
	return sc, nil
}
