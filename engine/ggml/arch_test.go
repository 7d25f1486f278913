package ggml

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stratanet/strata/engine"
)

// renamedArch writes the file at path with general.architecture and the
// architecture's keys renamed to name, as a file of a new architecture
// would read.
func renamedArch(t *testing.T, path, name string) string {
	t.Helper()
	f, fh, err := engine.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	arch, _ := f.String("general.architecture")
	var kvs []engine.KV
	for _, kv := range f.KV {
		switch {
		case kv.Key == "general.architecture":
			kv.Value = name
		case strings.HasPrefix(kv.Key, arch+"."):
			kv.Key = name + strings.TrimPrefix(kv.Key, arch)
		}
		kvs = append(kvs, kv)
	}
	var ts []engine.WriteTensor
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		raw := make([]byte, ti.Size)
		if err := f.ReadTensor(ti, raw); err != nil {
			t.Fatal(err)
		}
		ts = append(ts, engine.WriteTensor{Name: ti.Name, Dims: ti.Dims, Type: ti.Type,
			Data: func(w io.Writer) error { _, err := w.Write(raw); return err }})
	}
	out := filepath.Join(t.TempDir(), name+".gguf")
	fo, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer fo.Close()
	if err := engine.WriteGGUF(fo, kvs, ts); err != nil {
		t.Fatal(err)
	}
	if err := fo.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

func registerOnce(a *engine.Arch) {
	if _, err := engine.Architecture(a.Name); err != nil {
		engine.Register(a)
	}
}

// TestRegisteredArch: an architecture registered with engine alone (here
// phi3's definition under a name of its own) runs on the ggml backend too,
// within the F32 limit of engine.Local.
func TestRegisteredArch(t *testing.T) {
	def, err := engine.Architecture("phi3")
	if err != nil {
		t.Fatal(err)
	}
	cp := *def
	cp.Name = "strata-test-ggml-phi3"
	registerOnce(&cp)
	path := renamedArch(t, gen(t, "phi3", shapes["phi3"], engine.F32), cp.Name)
	want := run(t, []engine.Stage{openLocal(t, path)}, []int32{50, 51})
	got := run(t, []engine.Stage{open(t, path, WithThreads(2))}, []int32{50, 51})
	for i := range want {
		if d := relDist(want[i], got[i]); !(d <= limits[engine.F32]) {
			t.Errorf("step %d: relative distance %.3g from engine.Local, limit %.3g", i, d, limits[engine.F32])
		}
	}
}

// TestUnsupportedOps: a block using an op the ggml backend does not
// implement fails its step with ErrUnsupportedArch; the session does not
// advance.
func TestUnsupportedOps(t *testing.T) {
	llama, _ := engine.Architecture("llama")
	// Sinks and mixtures of experts run now; GELU experts do not yet.
	name := "strata-test-ggml-moe-gelu"
	registerOnce(&engine.Arch{Name: name, Globals: llama.Globals, Tensors: llama.Tensors,
		Block: func(o engine.Ops, _ *engine.Layer, x engine.Tensor) engine.Tensor {
			return o.Add(x, o.MoE(x, engine.MoE{TopK: 1, NormTopK: true, GELU: true}))
		}})
	s := open(t, renamedArch(t, gen(t, "llama-gqa", shapes["llama-gqa"], engine.F32), name))
	ss, err := s.NewSession(8)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	if _, err := s.Forward(context.Background(), engine.Step{Session: ss, Tokens: []int32{1, 2}}); !errors.Is(err, engine.ErrUnsupportedArch) {
		t.Errorf("GELU experts: %v, want ErrUnsupportedArch", err)
	}
	if ss.Len() != 0 {
		t.Errorf("session holds %d positions after a failed step", ss.Len())
	}
}
