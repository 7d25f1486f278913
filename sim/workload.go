package sim

import (
	"math/rand/v2"
	"path/filepath"
)

// LoadAzureConvLengths reads the Azure conversation (input, output)
// pairs Helix samples lengths from.
func LoadAzureConvLengths(dir string) ([]Request, error) {
	path := filepath.Join(dir, "trace", "azure_conv_lengths.csv")
	rows, err := readCSV(path)
	if err != nil {
		return nil, err
	}
	return requests(rows, path, "")
}

// Poisson draws arrivals at rate per second over [0, duration), each with
// a length pair drawn uniformly from lengths.
func Poisson(rate, duration float64, lengths []Request, seed uint64) []Request {
	r := rand.New(rand.NewPCG(seed, 0xa77))
	var out []Request
	if rate <= 0 || len(lengths) == 0 {
		return nil
	}
	for t := r.ExpFloat64() / rate; t < duration; t += r.ExpFloat64() / rate {
		l := lengths[r.IntN(len(lengths))]
		out = append(out, Request{At: t, Input: l.Input, Output: l.Output})
	}
	return out
}

// HelixSwarmNodes turns a Helix cluster's machines into swarm nodes.
func HelixSwarmNodes(dir, setup string) ([]SwarmNode, error) {
	path := filepath.Join(dir, "clusters", setup, "nodes.csv")
	rows, err := readCSV(path)
	if err != nil {
		return nil, err
	}
	var out []SwarmNode
	for _, r := range rows {
		out = append(out, SwarmNode{ID: "n" + r["node_id"], GPU: r["gpu"], Region: r["region"]})
	}
	return out, nil
}
