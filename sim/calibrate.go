package sim

import (
	"fmt"
	"sort"
)

// Calibration is one of Helix's published simulations next to our replay
// of the same placement, scheduler and workload.
type Calibration struct {
	Setup, Model, Mode, Method string
	Published                  float64 // decode tok/s, Helix's simulator
	Simulated                  float64 // decode tok/s, ours (parts summed)
	Parts                      []Result
	Source                     string
}

// Ratio is simulated ÷ published.
func (c Calibration) Ratio() float64 { return c.Simulated / c.Published }

// CalibrateHelix replays every published simulation of a setup and model
// (every method and mode, the parts of one section summed as Helix sums
// them).
func CalibrateHelix(dir, setup, model string, seed uint64) ([]Calibration, error) {
	runs, err := LoadHelixRuns(dir)
	if err != nil {
		return nil, err
	}
	pub, err := LoadHelixPublished(dir)
	if err != nil {
		return nil, err
	}
	var out []Calibration
	for _, p := range pub {
		if p.Setup != setup || p.Model != model {
			continue
		}
		c := Calibration{Setup: setup, Model: model, Mode: p.Mode, Method: p.Method, Published: p.TokS, Source: p.Source}
		for _, r := range runs {
			// Only the parts of the published figure's own section: the
			// same method and mode recur in other sections on other
			// layouts (geo24 offline Helix and Swarm in §6.4 and §6.7,
			// published separately), and summing those doubled the figure.
			if r.Section != p.Section || r.Setup != setup || r.Model != model || r.Mode != p.Mode || r.Method != p.Method {
				continue
			}
			res, err := ReplayHelix(dir, r, seed)
			if err != nil {
				return nil, fmt.Errorf("replay %s %s %s %s: %w", setup, r.Mode, r.Method, r.Part, err)
			}
			c.Parts = append(c.Parts, res)
			c.Simulated += res.DecodeTokS
		}
		if len(c.Parts) > 0 {
			out = append(out, c)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Mode != out[j].Mode {
			return out[i].Mode > out[j].Mode // online first
		}
		return false
	})
	return out, nil
}
