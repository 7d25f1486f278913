package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"go.uber.org/zap/zapcore"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/engine/store"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/node"
	"github.com/stratanet/strata/node/api"
	"github.com/stratanet/strata/swarm"
)

// Validate checks every setting; errors name the YAML keys. Bind's
// loader validates too, naming each setting as its source spells it.
func (c Config) Validate() error { return c.validate(nil) }

// validate checks every setting and joins the errors; src says where
// each key's value came from (absent: the default).
func (c Config) validate(src map[string]*FieldError) error {
	var errs []error
	bad := func(key, format string, args ...any) {
		e := &FieldError{Key: key, Source: FromDefault}
		if s, ok := src[key]; ok {
			*e = *s
		}
		e.Msg = fmt.Sprintf(format, args...)
		errs = append(errs, e)
	}
	// Which of two exclusive settings to blame: the one given by the
	// higher source.
	blame := func(a, b string) string {
		if sa, sb := src[a], src[b]; sa == nil || (sb != nil && sb.Source > sa.Source) {
			return b
		}
		return a
	}

	// Swarm.
	if c.DataDir == "" {
		bad("data_dir", "must not be empty")
	}
	if len(c.Listen) == 0 {
		bad("listen", "give at least one multiaddr, or \"none\"")
	} else if !(len(c.Listen) == 1 && c.Listen[0] == "none") {
		for _, a := range c.Listen {
			if _, err := ma.NewMultiaddr(a); err != nil {
				bad("listen", "%q is not a multiaddr: %v", a, err)
			}
		}
	}
	for _, a := range c.Bootstrap {
		if swarm.IsBootstrapList(a) {
			continue
		}
		if _, err := peer.AddrInfoFromString(a); err != nil {
			bad("bootstrap", "%q is not a full multiaddr with /p2p/ID, nor a published list /dnsaddr/NAME: %v", a, err)
		}
	}
	if !(len(c.DHTBootstrap) == 1 && c.DHTBootstrap[0] == "none") {
		for _, a := range c.DHTBootstrap {
			if _, err := peer.AddrInfoFromString(a); err != nil {
				bad("dht_bootstrap", "%q is not a full multiaddr with /p2p/ID (or \"none\"): %v", a, err)
			}
		}
	}
	if c.Found && len(c.Bootstrap) > 0 {
		bad(blame("found", "bootstrap"), "a founder joins no one: give found or bootstrap, not both")
	}
	if c.Found && !c.PublicSwarm() {
		bad("found", "founds a public swarm: needs a swarm name of its own (--swarm), no swarm key and a public DHT (dht_bootstrap); without those a node with no bootstrap founds anyway")
	}
	if c.SwarmFounder != "" {
		switch id, err := peer.Decode(c.SwarmFounder); {
		case err != nil:
			bad("swarm_founder", "%q is not a peer ID: %v", c.SwarmFounder, err)
		case !c.PublicSwarm():
			bad("swarm_founder", "pins a public swarm's founder: needs a swarm name of its own (--swarm), no swarm key and a public DHT (dht_bootstrap)")
		case c.Found:
			bad(blame("swarm_founder", "found"), "a founder is its swarm's founder: give found or swarm_founder, not both")
		default:
			if _, err := id.ExtractPublicKey(); err != nil {
				bad("swarm_founder", "%s carries no public key to check the founder's signature with: %v", c.SwarmFounder, err)
			}
		}
	}
	if c.SwarmKey != "" {
		if _, err := swarm.LoadSwarmKey(c.SwarmKey); err != nil {
			bad("swarm_key", "%v", err)
		}
	}
	if strings.TrimSpace(c.Swarm) == "" {
		bad("swarm", "must not be empty")
	}
	switch c.Reachability {
	case "auto", "public", "private":
	default:
		bad("reachability", "%q: want auto, public or private", c.Reachability)
	}
	if c.Heartbeat <= 0 {
		bad("heartbeat", "%v: must be positive", c.Heartbeat)
	}

	// The model.
	switch {
	case c.Model != "" && c.SimModel != "":
		bad(blame("model", "sim_model"), "give one of model and sim_model, not both")
	case c.SimModel != "" && c.GPU == "":
		bad("sim_model", "a simulated model needs a device: set gpu")
	case c.ModelID != "" && (c.Model != "" || c.SimModel != ""):
		bad("model_id", "give one of model, model_id and sim_model")
	case c.ModelID != "" && len(c.Bootstrap) == 0 && (!c.PublicSwarm() || c.Found):
		bad("model_id", "a node without the model file learns the model from peers: set bootstrap, or join a public swarm by name (--swarm NAME)")
	case len(c.ModelID) > 128 || strings.ContainsAny(c.ModelID, " /\\"):
		bad("model_id", "%q is not a model fingerprint (strata model inspect prints it)", c.ModelID)
	}
	if c.UploadRate < 0 {
		bad("upload_rate", "%d: must not be negative", c.UploadRate)
	}
	if c.Model != "" {
		// A model reference (store name, hf://…, URL) that is no file is
		// resolved by the command through the model store, not here.
		if fi, err := os.Stat(c.Model); err != nil {
			switch _, rerr := store.ParseRef(c.Model); {
			case rerr != nil && errors.Is(err, fs.ErrNotExist):
				bad("model", "%s: no such file; give a GGUF file, a model store name (strata model list) or an hf://… or https://… reference", c.Model)
			case rerr != nil || !errors.Is(err, fs.ErrNotExist):
				bad("model", "%v", err)
			}
		} else if fi.IsDir() {
			bad("model", "%s is a directory, not a GGUF file", c.Model)
		}
	}
	if c.SimModel != "" {
		if _, err := layers.Model(c.SimModel); err != nil {
			bad("sim_model", "%v", err)
		}
	}
	if c.GPU != "" {
		if _, err := layers.Device(c.GPU); err != nil {
			bad("gpu", "%v", err)
		}
	}
	if c.Memory < 0 {
		bad("memory", "%d: must not be negative", c.Memory)
	}
	if c.MaxLayers < 0 {
		bad("max_layers", "%d: must not be negative", c.MaxLayers)
	}
	if c.QueueTimeout <= 0 {
		bad("queue_timeout", "%v: must be positive", c.QueueTimeout)
	}
	if c.QueueMax <= 0 {
		bad("queue_max", "%d: must be positive", c.QueueMax)
	}
	if !(c.VerifyRate >= 0 && c.VerifyRate <= 1) && c.VerifyRate != -1 {
		bad("verify_rate", "%v: must be between 0 and 1 (or -1: the swarm's)", c.VerifyRate)
	}
	if !(c.SwarmVerifyRate >= 0 && c.SwarmVerifyRate <= 1) {
		bad("swarm_verify_rate", "%v: must be between 0 and 1", c.SwarmVerifyRate)
	}
	if len(c.Stewards) > consensus.MaxStewards {
		bad("stewards", "%d: at most %d", len(c.Stewards), consensus.MaxStewards)
	}
	for _, id := range c.Stewards {
		if p, err := peer.Decode(id); err != nil {
			bad("stewards", "%q: not a peer ID: %v", id, err)
		} else if _, err := p.ExtractPublicKey(); err != nil {
			bad("stewards", "%q: its key is not in the ID (use Ed25519 host keys): %v", id, err)
		}
	}
	if c.TrustChecks < 0 || c.TrustChecks > 1<<20 {
		bad("trust_checks", "%d: must be between 0 (the default) and %d", c.TrustChecks, 1<<20)
	}
	if c.PlanSessionTokens < 0 || c.PlanSessionTokens > consensus.MaxSessionTokens {
		bad("plan_session_tokens", "%d: must be between 0 (none) and %d", c.PlanSessionTokens, consensus.MaxSessionTokens)
	}
	switch c.Engine {
	case "go", "ggml", "auto":
	default:
		bad("engine", "%q: go, ggml or auto", c.Engine)
	}
	if c.GGMLLibDir != "" && c.Engine == "go" {
		bad("ggml_lib_dir", "set, but the engine is go: give engine ggml or auto")
	}
	if c.Engine != "go" && c.SimModel != "" {
		bad("engine", "%s for a simulated model: a simulated node has no engine to choose", c.Engine)
	}
	if c.Threads < 0 {
		bad("threads", "%d: must not be negative", c.Threads)
	}
	if _, err := node.ParseWire(c.Wire); err != nil {
		bad("wire", "%v", err)
	}
	if len(c.Region) > swarm.MaxRegionLen {
		bad("region", "%d bytes: at most %d", len(c.Region), swarm.MaxRegionLen)
	}

	if c.SchedulerConfig != "" {
		if _, err := LoadSchedulerConfig(c.SchedulerConfig); err != nil {
			bad("scheduler_config", "%v", err)
		}
	}

	// The API.
	if c.APIEnabled() {
		if err := checkHostPort(c.API); err != nil {
			bad("api", "%q: %v", c.API, err)
		}
	}
	if c.APIKeyFile != "" {
		if _, err := api.ReadKeyFile(c.APIKeyFile); err != nil {
			bad("api_key_file", "%v", err)
		}
	}
	if c.APIMaxBody <= 0 {
		bad("api_max_body", "%d: must be positive", c.APIMaxBody)
	}

	// Logs.
	if _, err := zapcore.ParseLevel(c.LogLevel); err != nil {
		bad("log_level", "%q: want debug, info, warn or error", c.LogLevel)
	}
	if c.LogPeers < 0 {
		bad("log_peers", "%v: must not be negative", c.LogPeers)
	}
	return errors.Join(errs...)
}

// checkHostPort accepts host:port with a numeric port (host may be
// empty: every interface).
func checkHostPort(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New("want host:port, such as 127.0.0.1:8080")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("port %q: want a number from 0 to 65535", port)
	}
	return nil
}
