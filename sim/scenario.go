package sim

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"

	"gopkg.in/yaml.v3"
)

// ErrScenario reports a simulation scenario that does not parse or validate.
var ErrScenario = errors.New("sim: bad scenario")

// Scenario is a simulation scenario as written in YAML.
type Scenario struct {
	Name        string    `yaml:"name"`
	Description string    `yaml:"description"`
	Seed        uint64    `yaml:"seed"`
	Helix       *HelixRef `yaml:"helix"`

	dir string // the scenario file's directory, for relative paths
}

// HelixRef replays Helix's published simulations of one setup and model.
type HelixRef struct {
	// Dir holds the Helix reference data, relative to the scenario file.
	Dir   string `yaml:"dir"`
	Setup string `yaml:"setup"`
	Model string `yaml:"model"`
	// Modes to replay: online, offline (empty: both).
	Modes []string `yaml:"modes"`
}

// ParseScenario reads a scenario; path names it in errors and anchors its
// relative paths.
func ParseScenario(path string, data []byte) (*Scenario, error) {
	var sc Scenario
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&sc); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrScenario, path, err)
	}
	sc.dir = filepath.Dir(path)
	if sc.Name == "" {
		return nil, fmt.Errorf("%w: %s: no name", ErrScenario, path)
	}
	if sc.Helix == nil {
		return nil, fmt.Errorf("%w: %s: nothing to simulate (give a helix section)", ErrScenario, path)
	}
	h := sc.Helix
	if h.Dir == "" || h.Setup == "" || h.Model == "" {
		return nil, fmt.Errorf("%w: %s: helix needs dir, setup and model", ErrScenario, path)
	}
	for _, m := range h.Modes {
		if m != "online" && m != "offline" {
			return nil, fmt.Errorf("%w: %s: helix mode %q (want online or offline)", ErrScenario, path, m)
		}
	}
	return &sc, nil
}

// PolicyReport is one policy's figures, in the units of --json.
type PolicyReport struct {
	Policy      string  `json:"policy"`
	GoodputTokS float64 `json:"goodput_tok_s"`
	TTFTp50ms   float64 `json:"ttft_p50_ms"`
	TTFTp99ms   float64 `json:"ttft_p99_ms"`
	TPOTp50ms   float64 `json:"tpot_p50_ms"`
	TPOTp99ms   float64 `json:"tpot_p99_ms"`
	Completed   int     `json:"completed"`
	Failed      int     `json:"failed"`

	decodeTokS float64
	events     uint64
	series     []float64
	bin        float64
}

// PublishedRow is a paper figure next to our simulation of its placement.
type PublishedRow struct {
	Policy      string  `json:"policy"`
	GoodputTokS float64 `json:"goodput_tok_s"`
	Simulated   float64 `json:"simulated_tok_s"`
	Source      string  `json:"source"`
}

// Report is a scenario's outcome.
type Report struct {
	Scenario  string         `json:"scenario"`
	Policies  []PolicyReport `json:"policies"`
	Published []PublishedRow `json:"published"`
}

// policyReport folds the parts of one policy (Helix sums sub-clusters).
func policyReport(name string, parts []Result) PolicyReport {
	p := PolicyReport{Policy: name}
	var ttft50, ttft99, tpot50, tpot99, w float64
	for _, r := range parts {
		p.GoodputTokS += r.GoodputTokS
		p.decodeTokS += r.DecodeTokS
		p.Completed += r.Completed
		p.Failed += r.Failed
		p.events += r.Events
		// Latency of a sum of parts: weighted by decode rate (Helix merges
		// the samples; this is close where parts are alike).
		ttft50 += r.TTFTp50 * r.DecodeTokS
		ttft99 = max(ttft99, r.TTFTp99)
		tpot50 += r.TPOTp50 * r.DecodeTokS
		tpot99 = max(tpot99, r.TPOTp99)
		w += r.DecodeTokS
		p.bin = r.SeriesBin
		for i, v := range r.Series {
			for len(p.series) <= i {
				p.series = append(p.series, 0)
			}
			p.series[i] += v
		}
	}
	if w > 0 {
		p.TTFTp50ms, p.TPOTp50ms = ttft50/w*1e3, tpot50/w*1e3
	}
	p.TTFTp99ms, p.TPOTp99ms = ttft99*1e3, tpot99*1e3
	return p
}

// Run simulates a scenario. policies filters by name (empty: all).
func Run(sc *Scenario, policies ...string) (Report, error) {
	rep := Report{Scenario: sc.Name}
	want := map[string]bool{}
	for _, p := range policies {
		want[p] = true
	}
	h := sc.Helix
	dir := h.Dir
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(sc.dir, dir)
	}
	if len(want) == 0 || want["helix-published"] {
		cals, err := CalibrateHelix(dir, h.Setup, h.Model, sc.Seed)
		if err != nil {
			return Report{}, err
		}
		modes := map[string]bool{}
		for _, m := range h.Modes {
			modes[m] = true
		}
		for _, c := range cals {
			if len(modes) > 0 && !modes[c.Mode] {
				continue
			}
			name := c.Method + "-" + c.Mode
			rep.Policies = append(rep.Policies, policyReport(name, c.Parts))
			rep.Published = append(rep.Published, PublishedRow{Policy: name, GoodputTokS: c.Published, Simulated: c.Simulated,
				Source: "Helix ASPLOS'25 artifact, " + c.Source + " (decode tok/s of Helix's simulator)"})
		}
	}
	return rep, nil
}
