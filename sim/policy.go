package sim

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stratanet/strata/layers"
)

// Policies are the swarm policies RunSwarm simulates.
var Policies = []string{"strata", "petals", "parallax"}

// plannerModel gives the planner the hyper-parameters of the model Helix's
// profiles measured.
func plannerModel(model string) (layers.ModelSpec, error) {
	switch model {
	case "llama2_70b":
		return layers.NewModelSpec(layers.HyperParams{Name: "llama-2-70b", Layers: 80, Hidden: 8192, Heads: 64,
			KVHeads: 8, FFN: 28672, Vocab: 32000, BytesPerParam: 2})
	case "llama1_30b":
		return layers.NewModelSpec(layers.HyperParams{Name: "llama-30b", Layers: 60, Hidden: 6656, Heads: 52,
			KVHeads: 52, FFN: 17920, Vocab: 32000, BytesPerParam: 2})
	}
	return layers.ModelSpec{}, fmt.Errorf("%w: no planner model for %q", ErrBadData, model)
}

// helixHardware gives the planner Helix's machine types from their
// datasheets (multi-GPU machines add up).
func helixHardware(gpu string) (layers.Hardware, error) {
	const GB, GiB = 1e9, 1 << 30
	base := map[string]layers.Hardware{
		"a100": {Name: "a100-40g", MemoryBytes: 40 * GiB, MemBandwidth: 1555 * GB, TFLOPS: 312},
		"l4":   {Name: "l4", MemoryBytes: 24 * GiB, MemBandwidth: 300 * GB, TFLOPS: 121},
		"t4":   {Name: "t4", MemoryBytes: 16 * GiB, MemBandwidth: 320 * GB, TFLOPS: 65},
		"v100": {Name: "v100", MemoryBytes: 16 * GiB, MemBandwidth: 900 * GB, TFLOPS: 125},
	}
	name, n := strings.ToLower(gpu), 1.0
	if b, x, ok := strings.Cut(name, "x"); ok {
		k, err := strconv.Atoi(x)
		if err != nil {
			return layers.Hardware{}, fmt.Errorf("%w: gpu %q", ErrBadData, gpu)
		}
		name, n = b, float64(k)
	}
	h, ok := base[name]
	if !ok {
		return layers.Hardware{}, fmt.Errorf("%w: gpu %q", ErrBadData, gpu)
	}
	h.Name = strings.ToLower(gpu)
	h.MemoryBytes *= n
	h.MemBandwidth *= n
	h.TFLOPS *= n
	h.NetBandwidth = 1e9
	return h, nil
}

// maxLayers reads gpus.csv: the most layers Helix lets each machine type
// hold for a model, the same cap every policy is given here.
func maxLayers(dir, model string) (map[string]int, error) {
	path := filepath.Join(dir, "profiles", "gpus.csv")
	rows, err := readCSV(path)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, r := range rows {
		if r["model"] == model {
			v, err := num(r, "max_num_layers", path)
			if err != nil {
				return nil, err
			}
			out[strings.ToLower(r["machine_type"])] = int(v)
		}
	}
	return out, nil
}

func kvCapacity(dir, model, gpu string, k int) (int64, error) {
	path := filepath.Join(dir, "profiles", model, gpu, "settings.csv")
	rows, err := readCSV(path)
	if err != nil {
		return 0, err
	}
	if len(rows) == 0 {
		return 0, fmt.Errorf("%w: %s: no rows", ErrBadData, path)
	}
	row := rows[len(rows)-1]
	for _, r := range rows {
		if r["num_layers_on_node"] == strconv.Itoa(k) {
			row = r
		}
	}
	v, err := num(row, "kv_cache_capacity_token_layers", path)
	return int64(v), err
}
