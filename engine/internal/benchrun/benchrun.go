// Package benchrun times an engine.Stage the way make bench-llamacpp
// compares engines: a decode, a prefill, or 16 sessions decoding together,
// through the stage's real path (Forward, ForwardBatch, greedy
// engine.Sample). llamabench runs it on engine.Local; engine/ggml's
// cmd/ggml-bench on the ggml engine (a nested module: it can import this
// package, not llamabench's main).
package benchrun

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/stratanet/strata/engine"
)

// Result is one measurement, as both sides print it (bench.mjs prints the
// same fields).
type Result struct {
	Engine  string  `json:"engine"`
	Mode    string  `json:"mode"`
	Threads int     `json:"threads"`
	Model   string  `json:"model"`
	Tokens  int     `json:"tokens"`
	Seconds float64 `json:"seconds"`
	TokS    float64 `json:"tok_s"`
	// Strata only: the weights one token reads (engine.Info().StepBytes).
	WeightBytes int64 `json:"weight_bytes,omitempty"`
	// The ggml CPU kernels: llama.cpp's backend variant (libggml-cpu-VARIANT.so);
	// the ggml engine's compiled-in features.
	CPUVariant string `json:"cpu_variant,omitempty"`
	// The KV cache a decode ran with: the type of its keys and values
	// ("f32", "f16", ...) and the positions it was made for.
	KVType    string `json:"kv_type,omitempty"`
	KVContext int    `json:"kv_context,omitempty"`
	// FlashAttention: whether llama.cpp's context, or the ggml engine's
	// stage, computed attention as flash attention.
	FlashAttention *bool `json:"flash_attention,omitempty"`
	// OthersLoad is set by the driver: the cores that other processes on
	// the machine kept busy during the measurement (-1: unknown).
	OthersLoad float64 `json:"-"`
	// PeakRSS is set by the driver: the measuring process's peak resident
	// memory in bytes (getrusage's ru_maxrss), the weights loaded included.
	PeakRSS int64 `json:"-"`
}

// Modes, with their defaults: decode STEPS tokens after a PROMPT-token
// prompt; prefill of TOKENS tokens; batch16: 16 sessions of a PROMPT-token
// prompt each, then STEPS decode steps of all 16 together.
const (
	Decode  = "decode"
	Prefill = "prefill"
	Batch16 = "batch16"
)

// Tokens are n token ids valid for any vocabulary of 1,003 or more, the
// same as bench.mjs makes, away from the special ids at the start.
func Tokens(n, salt, vocab int) []int32 {
	m := min(vocab-3, 1000)
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(3 + (i*37+salt*101)%m)
	}
	return out
}

// Run times one mode on s after a warm-up step; only the timed region
// counts. The result names the engine as engine.Info().Engine does, and
// the model as path.
func Run(s engine.Stage, path, mode string, steps, promptLen, n int) (Result, error) {
	var err error
	info := s.Info()
	ctx := context.Background()
	greedy := engine.SamplingParams{}
	r := Result{Engine: info.Engine, Mode: mode, Threads: info.Threads, Model: path, WeightBytes: cmp.Or(info.StepBytes, info.WeightBytes)}
	switch mode {
	case Decode:
		r.KVContext = promptLen + steps + 8
		r.KVType = kvType(info)
		ss, err := s.NewSession(r.KVContext)
		if err != nil {
			return r, err
		}
		defer ss.Close()
		out, err := s.Forward(ctx, engine.Step{Session: ss, Tokens: Tokens(promptLen, 0, info.Vocab)})
		if err != nil {
			return r, err
		}
		var t0 time.Time
		for i := -1; i < steps; i++ { // i == -1: the warm-up step
			if i == 0 {
				t0 = time.Now()
			}
			tok := engine.Sample(out.Logits, greedy, ss.Len(), nil)
			if out, err = s.Forward(ctx, engine.Step{Session: ss, Pos: ss.Len(), Tokens: []int32{tok}}); err != nil {
				return r, err
			}
		}
		r.Tokens, r.Seconds = steps, time.Since(t0).Seconds()
	case Prefill:
		warm, err := s.NewSession(8)
		if err != nil {
			return r, err
		}
		if _, err := s.Forward(ctx, engine.Step{Session: warm, Tokens: Tokens(8, 7, info.Vocab)}); err != nil {
			return r, err
		}
		warm.Close()
		ss, err := s.NewSession(n + 8)
		if err != nil {
			return r, err
		}
		defer ss.Close()
		prompt := Tokens(n, 0, info.Vocab)
		t0 := time.Now()
		if _, err := s.Forward(ctx, engine.Step{Session: ss, Tokens: prompt}); err != nil {
			return r, err
		}
		r.Tokens, r.Seconds = n, time.Since(t0).Seconds()
	case Batch16:
		const nseq = 16
		sess := make([]engine.Session, nseq)
		outs := make([]engine.Output, nseq)
		for i := range sess {
			if sess[i], err = s.NewSession(promptLen + steps + 8); err != nil {
				return r, err
			}
			defer sess[i].Close()
			if outs[i], err = s.Forward(ctx, engine.Step{Session: sess[i], Tokens: Tokens(promptLen, i+1, info.Vocab)}); err != nil {
				return r, err
			}
		}
		batch := make([]engine.Step, nseq)
		var t0 time.Time
		for k := -1; k < steps; k++ { // k == -1: the warm-up step
			if k == 0 {
				t0 = time.Now()
			}
			for i, ss := range sess {
				tok := engine.Sample(outs[i].Logits, greedy, ss.Len(), nil)
				batch[i] = engine.Step{Session: ss, Pos: ss.Len(), Tokens: []int32{tok}}
			}
			if outs, err = s.ForwardBatch(ctx, batch); err != nil {
				return r, err
			}
		}
		r.Tokens, r.Seconds = nseq*steps, time.Since(t0).Seconds()
	default:
		return r, fmt.Errorf("unknown mode %q", mode)
	}
	r.TokS = float64(r.Tokens) / r.Seconds
	return r, nil
}

// kvType names the type of a stage's KV cache values from the bytes a
// position takes (Info.KVBytesPerToken) over the values it holds, or ""
// where the two do not divide (a cache laid out otherwise, as MLA's).
func kvType(info engine.Info) string {
	kd, vd := info.HParams.CacheDims()
	vals := int64(info.Hi-info.Lo) * int64(kd+vd)
	if vals <= 0 || info.KVBytesPerToken%vals != 0 {
		return ""
	}
	switch info.KVBytesPerToken / vals {
	case 4:
		return "f32"
	case 2:
		return "f16"
	case 1:
		return "8-bit"
	}
	return ""
}
