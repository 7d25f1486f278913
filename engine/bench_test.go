package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// benchShapes are the shapes of the stories15M and stories110M models
// (llama2.c), with a 32,000-token vocabulary, and stories15M as phi3.
var benchShapes = []struct {
	name string
	c    GenConfig
}{
	{"stories15M", GenConfig{Arch: "llama", Layers: 6, Dim: 288, Heads: 6, FFN: 768, Vocab: 32000, Seed: 1}},
	{"stories110M", GenConfig{Arch: "llama", Layers: 12, Dim: 768, Heads: 12, FFN: 2048, Vocab: 32000, Seed: 1}},
	// stories15M's shape as phi3 (fused QKV and gate+up): compare with
	// the llama line above.
	{"stories15M-phi3", GenConfig{Arch: "phi3", Layers: 6, Dim: 288, Heads: 6, FFN: 768, Vocab: 32000, Seed: 1}},
}

// BenchmarkDecode reports single-session decode tokens/s at 1 and 2
// threads, context kept between 64 and 128 positions.
func BenchmarkDecode(b *testing.B) {
	for _, sh := range benchShapes {
		for _, dt := range []DType{F32, Q8_0} {
			b.Run(fmt.Sprintf("%s-%s", sh.name, dt), func(b *testing.B) {
				c := sh.c
				c.DType = dt
				path := filepath.Join(b.TempDir(), "m.gguf")
				if err := GenerateFile(path, c); err != nil {
					b.Fatal(err)
				}
				for _, threads := range []int{1, 2} {
					b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
						benchDecode(b, path, threads)
					})
				}
			})
		}
	}
}

func benchDecode(b *testing.B, path string, threads int) {
	s, err := Open(path, WithThreads(threads))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ss, _ := s.NewSession(256)
	ctx := context.Background()
	prompt := make([]int32, 64)
	for i := range prompt {
		prompt[i] = int32(i*37%1000 + 3)
	}
	if _, err := s.Forward(ctx, Step{Session: ss, Tokens: prompt}); err != nil {
		b.Fatal(err)
	}
	tok := int32(5)
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuSeconds()
	for i := 0; i < b.N; i++ {
		if ss.Len() >= 128 {
			ss.Truncate(64)
		}
		out, err := s.Forward(ctx, Step{Session: ss, Pos: ss.Len(), Tokens: []int32{tok}})
		if err != nil {
			b.Fatal(err)
		}
		tok = Sample(out.Logits, SamplingParams{}, 0, nil)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tok/s")
	if cpu := cpuSeconds() - cpu0; cpu > 0 {
		b.ReportMetric(float64(b.N)/cpu, "tok/cpu-s")
	}
}

// BenchmarkKernels times one matrix-vector product of a 768×768 matrix.
func BenchmarkKernels(b *testing.B) {
	const n = 768
	w, x := make([]float32, n*n), make([]float32, n)
	for i := range w {
		w[i] = float32(i%17) - 8
	}
	for i := range x {
		x[i] = float32(i%5) - 2
	}
	out := make([]float32, n)
	for _, k := range []struct {
		name string
		f    func(out, w, x []float32)
	}{{"f32-portable", dotRowsF32Portable}, {"f32-" + simdKernel, dotRowsF32}} {
		b.Run(k.name, func(b *testing.B) {
			b.SetBytes(n * n * 4)
			for i := 0; i < b.N; i++ {
				for r := 0; r < n; r += 4 {
					k.f(out[r:r+4], w[r*n:(r+4)*n], x)
				}
			}
		})
	}
	q, d := make([]int8, n*n), make([]float32, n*n/32)
	quantizeQ8(w, q, d)
	m := &matrix{rows: n, cols: n, q8: q8ilFromPlain(q, d, n, n)}
	a := newAct(x, 1, n)
	a.prepare(m)
	for _, simd := range []bool{false, true} {
		name := "q8-portable"
		if simd {
			name = "q8-" + simdKernel
		}
		b.Run(name, func(b *testing.B) {
			useSIMD = simd
			defer func() { useSIMD = true }()
			b.SetBytes(n * n * 34 / 32)
			for i := 0; i < b.N; i++ {
				matmulQ8(out, m, a, 0, n)
			}
		})
	}
}

// BenchmarkBatchedDecode reports tokens/s when 8 sessions decode together
// (each weight read once per step for all of them), stories15M shape.
func BenchmarkBatchedDecode(b *testing.B) {
	c := benchShapes[0].c
	path := filepath.Join(b.TempDir(), "m.gguf")
	if err := GenerateFile(path, c); err != nil {
		b.Fatal(err)
	}
	s, err := Open(path, WithThreads(1))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const batch = 8
	steps := make([]Step, batch)
	for i := range steps {
		ss, _ := s.NewSession(256)
		if _, err := s.Forward(ctx, Step{Session: ss, Tokens: []int32{int32(i + 3), 10, 20, 30}}); err != nil {
			b.Fatal(err)
		}
		steps[i] = Step{Session: ss, Pos: 4, Tokens: []int32{5}}
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		for j := range steps {
			if steps[j].Pos >= 128 {
				steps[j].Session.Truncate(64)
				steps[j].Pos = 64
			}
		}
		outs, err := s.ForwardBatch(ctx, steps)
		if err != nil {
			b.Fatal(err)
		}
		for j := range steps {
			steps[j].Tokens = []int32{Sample(outs[j].Logits, SamplingParams{}, 0, nil)}
			steps[j].Pos++
		}
	}
	b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "tok/s")
}

// moeBenchShapes: two layers of Qwen3-30B-A3B's shape (128 experts of
// 768, 8 a token, 32 heads of 128, 4 KV heads) in Q4_K_M, a 4096-token
// vocabulary so that the layers dominate, and the same attention with a
// dense FFN of the 8 active experts' width (6144) to compare against.
var moeBenchShapes = []struct {
	name string
	c    GenConfig
}{
	{"qwen3-30b-a3b-2layers", GenConfig{Arch: "qwen3moe", Layers: 2, Dim: 2048, Heads: 32, KVHeads: 4, HeadDim: 128, FFN: 6144,
		Vocab: 4096, Seed: 1, Mix: "q4_k_m", Experts: 128, ExpertsUsed: 8, ExpertFFN: 768}},
	{"qwen3-dense-active-2layers", GenConfig{Arch: "qwen3", Layers: 2, Dim: 2048, Heads: 32, KVHeads: 4, HeadDim: 128, FFN: 6144,
		Vocab: 4096, Seed: 1, Mix: "q4_k_m"}},
	// deepseek2: DeepSeek-V2-Lite's layers (16 heads of 128 + 64 RoPE, V
	// 128, kv_lora 512; its dense first layer of 10944; 64 experts of 1408,
	// 6 a token, 2 shared, softmax routing), with a Q LoRA of 1536 (V2-Lite
	// has none, which llama.cpp reads only at 26 or 27 layers).
	{"deepseek-v2-lite-2layers", GenConfig{Arch: "deepseek2", Layers: 2, Dim: 2048, Heads: 16, HeadDim: 192, FFN: 10944,
		Vocab: 4096, Seed: 1, Mix: "q4_k_m", Experts: 64, ExpertsUsed: 6, ExpertFFN: 1408,
		DeepSeek2: DeepSeek2Gen{QLoraRank: 1536, KVLoraRank: 512, RopeDims: 64, VHeadDim: 128, SharedExperts: 2, Softmax: true, WeightsScale: 1}}},
}

// BenchmarkMoEDecode reports single-session decode tokens/s of the MoE
// shape and its dense equivalent at 1 and 2 threads, a batch of 16
// sessions decoding together (batch=16: tokens/s of all 16), where
// experts shared between the sessions are read once a step, and a
// 128-token prefill (prompt tokens/s).
func BenchmarkMoEDecode(b *testing.B) {
	for _, sh := range moeBenchShapes {
		b.Run(sh.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "m.gguf")
			if err := GenerateFile(path, sh.c); err != nil {
				b.Fatal(err)
			}
			for _, threads := range []int{1, 2} {
				b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) { benchDecode(b, path, threads) })
			}
			b.Run("batch=16/threads=2", func(b *testing.B) { benchDecodeBatch(b, path, 2, 16) })
			b.Run("prefill=128/threads=2", func(b *testing.B) { benchPrefill(b, path, 2, 128) })
		})
	}
}

// benchDecodeBatch decodes n sessions a step together after a 16-token
// prefill each, and reports tokens/s over all of them.
func benchDecodeBatch(b *testing.B, path string, threads, n int) {
	s, err := Open(path, WithThreads(threads))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	steps := make([]Step, n)
	for i := range steps {
		ss, _ := s.NewSession(256)
		prompt := make([]int32, 16)
		for j := range prompt {
			prompt[j] = int32((i*131+j*37)%1000 + 3)
		}
		if _, err := s.Forward(ctx, Step{Session: ss, Tokens: prompt}); err != nil {
			b.Fatal(err)
		}
		steps[i] = Step{Session: ss, Tokens: []int32{int32(5 + i)}}
	}
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuSeconds()
	for it := 0; it < b.N; it++ {
		for i := range steps {
			if steps[i].Session.Len() >= 128 {
				steps[i].Session.Truncate(16)
			}
			steps[i].Pos = steps[i].Session.Len()
		}
		outs, err := s.ForwardBatch(ctx, steps)
		if err != nil {
			b.Fatal(err)
		}
		for i := range steps {
			steps[i].Tokens = []int32{Sample(outs[i].Logits, SamplingParams{}, 0, nil)}
		}
	}
	b.ReportMetric(float64(b.N*n)/time.Since(start).Seconds(), "tok/s")
	if cpu := cpuSeconds() - cpu0; cpu > 0 {
		b.ReportMetric(float64(b.N*n)/cpu, "tok/cpu-s")
	}
}

// benchPrefill runs an n-token prefill into a fresh session per
// iteration and reports prompt tokens/s.
func benchPrefill(b *testing.B, path string, threads, n int) {
	s, err := Open(path, WithThreads(threads))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	prompt := make([]int32, n)
	for i := range prompt {
		prompt[i] = int32(i*37%1000 + 3)
	}
	ss, _ := s.NewSession(n)
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuSeconds()
	for it := 0; it < b.N; it++ {
		ss.Truncate(0)
		if _, err := s.Forward(context.Background(), Step{Session: ss, Tokens: prompt}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*n)/time.Since(start).Seconds(), "tok/s")
	if cpu := cpuSeconds() - cpu0; cpu > 0 {
		b.ReportMetric(float64(b.N*n)/cpu, "tok/cpu-s")
	}
}
