package config

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"time"

	"github.com/spf13/cobra"

	"github.com/stratanet/strata/node"
	"github.com/stratanet/strata/node/api"
	"github.com/stratanet/strata/swarm"
)

// parse binds a command as `strata node` would, parses args, and loads
// with env as the environment.
func parse(t *testing.T, env map[string]string, args ...string) (Config, error) {
	t.Helper()
	cmd := &cobra.Command{Use: "node", RunE: func(*cobra.Command, []string) error { return nil }}
	load := Bind(cmd, WithEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
	if err := cmd.ParseFlags(args); err != nil {
		return Config{}, err
	}
	return load()
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultsAreValid(t *testing.T) {
	c, err := parse(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Fatalf("no flags, no env, no file:\n%+v\nwant the defaults\n%+v", c, Default())
	}
	if c.ServesModel() || !c.APIEnabled() || c.API != DefaultAPI {
		t.Fatalf("defaults: serves %v, api %q", c.ServesModel(), c.API)
	}
}

// TestPrecedence: flags > STRATA_* > file > defaults, key by key, lists
// replaced whole.
func TestPrecedence(t *testing.T) {
	file := writeFile(t, "node.yaml", `# a node
max_layers: 2
api: 127.0.0.1:9000
listen: [/ip4/127.0.0.1/tcp/4101]
memory: 8GiB
heartbeat: 750ms
region: file-region
log_json: true
`)
	env := map[string]string{
		EnvConfig:           file,
		"STRATA_MAX_LAYERS": "3",
		"STRATA_LISTEN":     "/ip4/127.0.0.1/tcp/4201,/ip4/127.0.0.1/udp/4201/quic-v1",
		"STRATA_REGION":     "env-region",
		"STRATA_THREADS":    "2",
		"STRATA_RELAY":      "false",
		"STRATA_IGNORED":    "no such setting: ignored",
	}
	c, err := parse(t, env, "--max-layers", "4", "--region", "flag-region", "--bootstrap",
		"/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWCUshCLdHLH88dYyM4vSDLZZTWP12PR1EB2m16XLobCC5")
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.MaxLayers = 4                                     // flag over env over file
	want.Region = "flag-region"                            // flag over env over file
	want.Listen = strings.Split(env["STRATA_LISTEN"], ",") // env over file, replaced
	want.Threads = 2                                       // env over default
	want.Relay = false                                     // env over default
	want.API = "127.0.0.1:9000"                            // file over default
	want.Memory = 8 << 30                                  // file, with a unit
	want.Heartbeat = 750 * time.Millisecond
	want.LogJSON = true
	want.Bootstrap = []string{"/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWCUshCLdHLH88dYyM4vSDLZZTWP12PR1EB2m16XLobCC5"}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", c, want)
	}

	// --config beats STRATA_CONFIG; a flag list replaces the file's.
	other := writeFile(t, "other.yaml", "max_layers: 7\nlisten: [/ip4/127.0.0.1/tcp/1]\n")
	c, err = parse(t, map[string]string{EnvConfig: file}, "--config", other, "--listen", "/ip4/127.0.0.1/tcp/2")
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxLayers != 7 || !slices.Equal(c.Listen, []string{"/ip4/127.0.0.1/tcp/2"}) || c.API != DefaultAPI {
		t.Fatalf("--config other.yaml: %+v", c)
	}
	// An empty file is all defaults.
	c, err = parse(t, nil, "--config", writeFile(t, "empty.yaml", "# nothing\n"))
	if err != nil || !reflect.DeepEqual(c, Default()) {
		t.Fatalf("empty file: %v %+v", err, c)
	}
}

// TestPublicSwarm: a swarm name of its own without a swarm key makes the
// swarm public, with the public network's DHT bootstrap peers unless
// dht_bootstrap says otherwise; a joiner by name may come with the model
// ID alone.
func TestPublicSwarm(t *testing.T) {
	c, err := parse(t, nil)
	if err != nil || c.PublicSwarm() {
		t.Fatalf("defaults: public %v (%v)", c.PublicSwarm(), err)
	}
	if len(c.DHTBootstrap) == 0 || !slices.Equal(c.DHTBootstrap, swarm.DefaultPublicBootstrap()) {
		t.Fatalf("default dht_bootstrap %v", c.DHTBootstrap)
	}
	c, err = parse(t, nil, "--swarm", "pub", "--model-id", "abc123")
	if err != nil || !c.PublicSwarm() {
		t.Fatalf("--swarm pub: public %v (%v)", c.PublicSwarm(), err)
	}
	key := writeFile(t, "swarm.key", "/key/swarm/psk/1.0.0/\n/base16/\n"+strings.Repeat("ab", 32)+"\n")
	for _, args := range [][]string{{"--swarm", "pub", "--dht-bootstrap", "none"}, {"--swarm", "pub", "--swarm-key", key}} {
		if c, err := parse(t, nil, args...); err != nil || c.PublicSwarm() {
			t.Errorf("%v: public %v (%v)", args, c.PublicSwarm(), err)
		}
	}
	// A published bootstrap list is a bootstrap entry of its own.
	if c, err := parse(t, nil, "--bootstrap", "/dnsaddr/boot.example.org"); err != nil || len(c.Bootstrap) != 1 {
		t.Fatalf("bootstrap list: %v", err)
	}
	if _, err := parse(t, nil, "--bootstrap", "/dns4/boot.example.org/tcp/4001"); err == nil || !strings.Contains(err.Error(), "nor a published list") {
		t.Fatalf("a DNS address without a peer ID: %v", err)
	}
	own := "/ip4/10.0.0.1/tcp/4001/p2p/12D3KooWCUshCLdHLH88dYyM4vSDLZZTWP12PR1EB2m16XLobCC5"
	c, err = parse(t, map[string]string{"STRATA_DHT_BOOTSTRAP": own}, "--swarm", "pub", "--found")
	if err != nil || !c.Found || !slices.Equal(c.DHTBootstrap, []string{own}) {
		t.Fatalf("own dht bootstrap: %+v (%v)", c.DHTBootstrap, err)
	}
}

// TestValidationNamesTheField: each bad value's error names the setting
// as its source spells it, with the file's line.
func TestValidationNamesTheField(t *testing.T) {
	keyFile := writeFile(t, "key", "  sk-test  \n")
	badSched := writeFile(t, "sched.yaml", "default: a\nprofiles:\n  - name: a\n    scorers: [{name: latency, weight: -1}]\n")
	emptyKey := writeFile(t, "empty-key", "\n")
	for _, tc := range []struct {
		name string
		file string
		env  map[string]string
		args []string
		want []string // substrings of the error
	}{
		{"negative flag", "", nil, []string{"--max-layers", "-1"}, []string{"--max-layers: -1: must not be negative"}},
		{"bad env value", "", map[string]string{"STRATA_API": "localhost"}, nil, []string{"STRATA_API: \"localhost\": want host:port"}},
		{"env that does not parse", "", map[string]string{"STRATA_MAX_LAYERS": "many"}, nil, []string{"STRATA_MAX_LAYERS: \"many\""}},
		{"env byte size", "", map[string]string{"STRATA_MEMORY": "lots"}, nil, []string{"STRATA_MEMORY: \"lots\""}},
		{"bad file value", "log_level: info\napi: nowhere\n", nil, nil, []string{"node.yaml:2: api: \"nowhere\""}},
		{"unknown file key", "region: x\ncolour: blue\n", nil, nil, []string{"node.yaml:2: colour: unknown key"}},
		{"file type error", "region: x\n\nmax_layers: [1, 2]\n", nil, nil, []string{"node.yaml:3: max_layers: cannot unmarshal"}},
		{"file byte size", "memory: 12 parsecs\n", nil, nil, []string{"node.yaml:1: memory:", "byte count"}},
		{"file duration", "heartbeat: soon\n", nil, nil, []string{"node.yaml:1: heartbeat:"}},
		{"file not a mapping", "- a\n- b\n", nil, nil, []string{"node.yaml:1: the file must be a mapping"}},
		{"file syntax", "region: x\napi: [\n", nil, nil, []string{"node.yaml:2: did not find expected node content"}},
		{"duplicate key", "api: a:1\napi: b:2\n", nil, nil, []string{"node.yaml:2: api given twice"}},
		{"model and sim_model", "model: /nonexistent.gguf\n", nil, []string{"--sim-model", "llama-3-8b", "--gpu", "t4"},
			[]string{"--sim-model: give one of model and sim_model", "node.yaml:1: model: /nonexistent.gguf: no such file; give a GGUF file, a model store name"}},
		{"sim_model without gpu", "", map[string]string{"STRATA_SIM_MODEL": "llama-3-8b"}, nil, []string{"STRATA_SIM_MODEL: a simulated model needs a device"}},
		{"unknown sim model", "sim_model: gpt-5\ngpu: t4\n", nil, nil, []string{"node.yaml:1: sim_model:"}},
		{"unknown gpu", "", nil, []string{"--sim-model", "llama-3-8b", "--gpu", "abacus"}, []string{"--gpu:", "abacus"}},
		{"bad listen", "", nil, []string{"--listen", "tcp://0.0.0.0:4001"}, []string{"--listen: \"tcp://0.0.0.0:4001\" is not a multiaddr"}},
		{"bad bootstrap", "bootstrap:\n  - /ip4/127.0.0.1/tcp/4001\n", nil, nil, []string{"node.yaml:1: bootstrap:", "/p2p/ID"}},
		{"bad reachability", "", map[string]string{"STRATA_REACHABILITY": "maybe"}, nil, []string{"STRATA_REACHABILITY: \"maybe\": want auto, public or private"}},
		{"missing swarm key", "swarm_key: /nonexistent/swarm.key\n", nil, nil, []string{"node.yaml:1: swarm_key:"}},
		{"empty api key file", "", nil, []string{"--api-key-file", emptyKey}, []string{"--api-key-file:", "is empty"}},
		{"bad log level", "log_level: loud\n", nil, nil, []string{"node.yaml:1: log_level: \"loud\""}},
		{"steward not a peer ID", "", nil, []string{"--stewards", "alice"}, []string{"--stewards: \"alice\": not a peer ID"}},
		{"long region", "", nil, []string{"--region", strings.Repeat("x", 40)}, []string{"--region: 40 bytes"}},
		{"unknown wire", "", nil, []string{"--wire", "int4"}, []string{"--wire: node: unknown wire mode \"int4\""}},
		{"wire in the file", "wire: q9\n", nil, nil, []string{"wire: node: unknown wire mode"}},
		{"zero heartbeat", "heartbeat: 0s\n", nil, nil, []string{"node.yaml:1: heartbeat: 0s: must be positive"}},
		{"bad scheduler config", "", nil, []string{"--scheduler-config", badSched},
			[]string{"--scheduler-config:", "profiles[0].scorers[0].weight"}},
		{"missing scheduler config", "scheduler_config: /nonexistent/sched.yaml\n", nil, nil,
			[]string{"node.yaml:1: scheduler_config:", "/nonexistent/sched.yaml"}},
		{"api port", "", nil, []string{"--api", "127.0.0.1:99999"}, []string{"--api: \"127.0.0.1:99999\": port"}},
		{"model_id without bootstrap", "", nil, []string{"--model-id", "abc123"}, []string{"--model-id: a node without the model file learns the model from peers"}},
		{"bad dht bootstrap", "", nil, []string{"--swarm", "pub", "--dht-bootstrap", "/ip4/127.0.0.1/tcp/4001"}, []string{"--dht-bootstrap: \"/ip4/127.0.0.1/tcp/4001\" is not a full multiaddr"}},
		{"found with bootstrap", "", nil, []string{"--swarm", "pub", "--found", "--bootstrap", "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWCUshCLdHLH88dYyM4vSDLZZTWP12PR1EB2m16XLobCC5"},
			[]string{"a founder joins no one"}},
		{"found in the default swarm", "", nil, []string{"--found"}, []string{"--found: founds a public swarm: needs a swarm name of its own"}},
		{"found without a public DHT", "", nil, []string{"--found", "--swarm", "pub", "--dht-bootstrap", "none"}, []string{"--found: founds a public swarm"}},
		{"model_id founding a public swarm", "", nil, []string{"--model-id", "abc123", "--swarm", "pub", "--found"}, []string{"--model-id: a node without the model file learns the model from peers"}},
		{"model_id and sim_model", "", nil, []string{"--model-id", "abc123", "--sim-model", "llama-3-8b", "--gpu", "t4"}, []string{"--model-id: give one of model, model_id and sim_model"}},
		{"bad upload rate", "upload_rate: -1\n", nil, nil, []string{"node.yaml:1: upload_rate:", "byte count"}},
		{"negative plan session tokens", "", nil, []string{"--plan-session-tokens", "-1"}, []string{"--plan-session-tokens: -1: must be between 0"}},
		{"plan session tokens beyond the bound", "", map[string]string{"STRATA_PLAN_SESSION_TOKENS": "1048577"}, nil,
			[]string{"STRATA_PLAN_SESSION_TOKENS: 1048577: must be between 0 (none) and 1048576"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				args = append([]string{"--config", writeFile(t, "node.yaml", tc.file)}, args...)
			}
			_, err := parse(t, tc.env, args...)
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%v does not wrap ErrInvalid", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q lacks %q", err, w)
				}
			}
			t.Logf("%v", err)
		})
	}
	// A good key file, and API off, pass.
	if _, err := parse(t, nil, "--api-key-file", keyFile, "--api", "none"); err != nil {
		t.Fatal(err)
	}
	// The example scheduling configuration passes, and becomes a node
	// option.
	c, err := parse(t, nil, "--scheduler-config", "../../routing/testdata/scheduler/example.yaml", "--sim-model", "llama-3-8b", "--gpu", "t4")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.NodeOptions(zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	// The prefix cache is on unless turned off.
	if !c.PrefixCache {
		t.Fatal("prefix cache off by default")
	}
	if c, err := parse(t, nil, "--prefix-cache=false"); err != nil || c.PrefixCache {
		t.Fatalf("--prefix-cache=false: %v, %v", c.PrefixCache, err)
	}
	// The adaptive upload limit is on unless turned off.
	if !c.UploadAdaptive {
		t.Fatal("adaptive upload limit off by default")
	}
	if c, err := parse(t, nil, "--upload-adaptive=false"); err != nil || c.UploadAdaptive {
		t.Fatalf("--upload-adaptive=false: %v, %v", c.UploadAdaptive, err)
	}
	// Work stealing is off unless turned on.
	if c.Steal {
		t.Fatal("stealing on by default")
	}
	if c, err := parse(t, nil, "--steal"); err != nil || !c.Steal {
		t.Fatalf("--steal: %v, %v", c.Steal, err)
	}
	// A model reference that is no file is left to the model store.
	for _, m := range []string{"Qwen/Qwen2.5-7B-Instruct-GGUF:q4_k_m", "hf://o/r/m.gguf"} {
		if c, err := parse(t, nil, "--model", m); err != nil || c.Model != m {
			t.Fatalf("--model %s: %+v, %v", m, c.Model, err)
		}
	}
	// The planner's session length is none unless given.
	if c.PlanSessionTokens != 0 {
		t.Fatalf("plan session tokens %d by default", c.PlanSessionTokens)
	}
	if c, err := parse(t, nil, "--plan-session-tokens", "1000"); err != nil || c.PlanSessionTokens != 1000 {
		t.Fatalf("--plan-session-tokens 1000: %v, %v", c.PlanSessionTokens, err)
	}
	// Trust checks: the default unless given; never negative.
	if c.TrustChecks != 0 {
		t.Fatalf("trust checks %d by default", c.TrustChecks)
	}
	if c, err := parse(t, nil, "--trust-checks", "4"); err != nil || c.TrustChecks != 4 {
		t.Fatalf("--trust-checks 4: %v, %v", c.TrustChecks, err)
	}
	if _, err := parse(t, nil, "--trust-checks", "-1"); err == nil {
		t.Fatal("--trust-checks -1 accepted")
	}
	// Stewards: none unless given; a list of peer IDs.
	if len(c.Stewards) != 0 {
		t.Fatalf("stewards %v by default", c.Stewards)
	}
	ids := []string{"12D3KooWJWoaqZhDaoEFshF7Rh1bpY9ohihFhzcW6d69Lr2NASuq", "12D3KooWK99VoVxNE7XzyBwXEzW7xhK7Gpv85r9F3V3fyKSUKPH5"}
	if c, err := parse(t, nil, "--stewards", strings.Join(ids, ",")); err != nil || !reflect.DeepEqual(c.Stewards, ids) {
		t.Fatalf("--stewards: %v, %v", c.Stewards, err)
	}
	// A flag that does not parse is cobra's error, naming the flag.
	if _, err := parse(t, nil, "--max-layers", "many"); err == nil || !strings.Contains(err.Error(), "--max-layers") {
		t.Fatalf("flag parse error %v", err)
	}
}

func TestByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{"0": 0, "4096": 4096, "24GiB": 24 << 30, "1.5GB": 1_500_000_000, "512 MiB": 512 << 20, "10kb": 10_000, "7B": 7} {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Fatalf("%q: %v %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"-1", "GiB", "1e30TiB", "NaN", "12 parsecs"} {
		if _, err := ParseByteSize(in); err == nil {
			t.Fatalf("%q accepted", in)
		}
	}
	if s := ByteSize(24 << 30).String(); s != "24GiB" {
		t.Fatal(s)
	}
}

// TestConfigStartsNodeAndAPI: a validated config's options start a real
// (simulated-model) node and its API, key file included.
func TestConfigStartsNodeAndAPI(t *testing.T) {
	dir := t.TempDir()
	keyFile := writeFile(t, "key", "sk-config-test\n")
	file := writeFile(t, "node.yaml", `sim_model: llama-3-8b
gpu: rtx4090
max_layers: 32
listen: [/ip4/127.0.0.1/tcp/0]
reachability: public
api: 127.0.0.1:0
log_level: warn
`)
	c, err := parse(t, map[string]string{"STRATA_DATA_DIR": dir}, "--config", file, "--api-key-file", keyFile)
	if err != nil {
		t.Fatal(err)
	}
	log, err := c.Logger()
	if err != nil {
		t.Fatal(err)
	}
	nopts, err := c.NodeOptions(log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.New(ctx, nopts...)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	aopts, err := c.APIOptions(log)
	if err != nil {
		t.Fatal(err)
	}
	s, err := api.New(api.NodeBackend(n), aopts...)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr, err := s.Start(c.API)
	if err != nil {
		t.Fatal(err)
	}
	get := func(key string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr.String()+"/v1/models", nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := get(""); status != http.StatusUnauthorized {
		t.Fatalf("without the key: %d %s", status, body)
	}
	status, body := get("sk-config-test")
	if status != http.StatusOK || !strings.Contains(body, `"simulated":true`) || n.Swarm().Hardware.Name != "rtx4090" {
		t.Fatalf("with the key: %d %s (hardware %s)", status, body, n.Swarm().Hardware.Name)
	}
	t.Logf("node %s serving %s on %s", n.ID(), n.Model().Name, addr)
}
