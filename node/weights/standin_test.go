package weights

import (
	"path/filepath"
	"testing"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/swarm/chunks"
)

// A node that joins without weights measures its hardware on a stand-in of
// the model's shape: for a mixture of experts, one whose tokens use as many
// experts of the same width, so the measured layer time is a MoE layer's.
func TestStandInKeepsShape(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []engine.GenConfig{
		{Arch: "qwen3moe", Layers: 3, Dim: 128, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 256, Vocab: 300, Seed: 1,
			Experts: 16, ExpertsUsed: 4, ExpertFFN: 96},
		{Arch: "qwen2", Layers: 3, Dim: 128, Heads: 4, KVHeads: 2, FFN: 256, Vocab: 300, Seed: 2},
		{Arch: "deepseek2", Layers: 3, Dim: 128, Heads: 4, FFN: 256, Vocab: 300, Seed: 3, Experts: 16, ExpertsUsed: 4, ExpertFFN: 64,
			DeepSeek2: engine.DeepSeek2Gen{KVLoraRank: 96, ExpertGroups: 4, GroupsUsed: 2, SharedExperts: 2}},
	} {
		path := filepath.Join(dir, c.Arch+".gguf")
		if err := engine.GenerateFile(path, c); err != nil {
			t.Fatal(err)
		}
		s, err := engine.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		hp := s.Info().HParams
		s.Close()
		f := &Remote{man: &chunks.Manifest{Fingerprint: c.Arch}, dir: dir, shape: hp}
		sp, err := f.StandIn()
		if err != nil {
			t.Fatalf("%s: %v", c.Arch, err)
		}
		st, err := engine.Open(sp, engine.WithRange(0, 1), engine.WithThreads(1))
		if err != nil {
			t.Fatalf("%s: stand-in layer: %v", c.Arch, err)
		}
		got := st.Info().HParams
		st.Close()
		if got.Arch != hp.Arch || got.Dim != hp.Dim || got.HeadDim != hp.HeadDim || got.ExpertsUsed != hp.ExpertsUsed ||
			got.ExpertFFN != hp.ExpertFFN || got.MoE() != hp.MoE() || got.KVLoraRank != hp.KVLoraRank ||
			got.SharedExperts != hp.SharedExperts || got.MLA != hp.MLA {
			t.Errorf("%s: stand-in %+v, model %+v", c.Arch, got, hp)
		}
	}
}
