package ggml

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stratanet/strata/engine"
)

// VulkanLibEnv names the directory holding libggml-vulkan.so (make
// build-vulkan writes bin/ggml-gpu/vulkan/lib/ollama); make test-vulkan
// sets it. Without it the Vulkan tests skip.
const VulkanLibEnv = "STRATA_VULKAN_LIB_DIR"

// vulkanDevice loads ggml-vulkan from $STRATA_VULKAN_LIB_DIR and returns
// the device a GPU stage then computes on, or skips where it is not set.
func vulkanDevice(t *testing.T) DeviceInfo {
	t.Helper()
	dir := os.Getenv(VulkanLibEnv)
	if dir == "" {
		t.Skipf("%s not set: make test-vulkan builds ggml-vulkan and runs this on Mesa's lavapipe", VulkanLibEnv)
	}
	if _, err := os.Stat(filepath.Join(dir, "libggml-vulkan.so")); err != nil {
		t.Fatalf("%s=%s: %v (make build-vulkan)", VulkanLibEnv, dir, err)
	}
	// ggml-vulkan leaves out CPU-type devices such as lavapipe unless
	// they are selected; it reads this when the library loads.
	if os.Getenv("GGML_VK_VISIBLE_DEVICES") == "" {
		os.Setenv("GGML_VK_VISIBLE_DEVICES", "0")
	}
	LoadLibDir(dir)
	d, err := Probe(GPU)
	if err != nil {
		t.Fatalf("no GPU device after loading %s: %v", dir, err)
	}
	if !strings.HasPrefix(d.Name, "Vulkan") {
		t.Fatalf("the GPU device is %+v, want a Vulkan one", d)
	}
	return d
}

// TestVulkanDevice: with ggml-vulkan loaded, the GPU device is Vulkan's,
// Auto takes it, it reports its memory and name, and a stage opened on it
// computes there and says so.
func TestVulkanDevice(t *testing.T) {
	d := vulkanDevice(t)
	t.Logf("device %+v, engine label %q", d, d.Engine())
	if auto, err := Probe(Auto); err != nil || auto != d {
		t.Fatalf("Auto: %+v, %v; want %+v", auto, err, d)
	}
	if d.Memory <= 0 || d.Description == "" {
		t.Fatalf("device %+v: want its memory and description", d)
	}
	path := gen(t, "llama-tied", shapes["llama-tied"], engine.F32)
	s := open(t, path, WithDevice(GPU))
	if s.Device() != d.Name || s.Info().Engine != d.Engine() {
		t.Fatalf("stage on %q labelled %q; want %q, %q", s.Device(), s.Info().Engine, d.Name, d.Engine())
	}
}

// vulkanShapes are the F32 files run on the Vulkan device: one of each
// attention and RoPE variant the CPU tests cover that lavapipe runs in
// seconds.
var vulkanShapes = []string{"llama-gqa", "llama-tied", "qwen2", "qwen3", "llama3.1", "phi3"}

// vulkanLimit is the relative distance allowed between the Vulkan
// device's logits and engine.Local's on the same F32 weights. On a device
// with F16 arithmetic (lavapipe has it) ggml-vulkan's matrix-matrix
// kernels stage both operands in F16 shared memory even for F32 weights
// (vulkan-shaders-gen: FLOAT_TYPE float16_t), so a prefill rounds weights
// and activations to F16 as ggml's CPU F16 path rounds activations: held
// to that path's limit, 1e-3 (measured here: ≤ 7.6e-4). With
// GGML_VK_DISABLE_F16 set (make test-vulkan runs both ways) every kernel
// is F32 and the CPU device's F32 limit holds (measured ≤ 7.3e-7).
func vulkanLimit() (float64, string) {
	if f32Kernels() {
		return limits[engine.F32], "F32 kernels (GGML_VK_DISABLE_F16)"
	}
	return limits[engine.F16], "F16 shared memory in matrix-matrix kernels"
}

// f32Kernels says whether ggml-vulkan runs F32 kernels only: it reads
// GGML_VK_DISABLE_F16 as set, whatever its value.
func f32Kernels() bool {
	_, set := os.LookupEnv("GGML_VK_DISABLE_F16")
	return set
}

// TestVulkanAgreesWithEngine: on F32 files the Vulkan stage's logits after
// a prefill and each decode step are within vulkanLimit of engine.Local's,
// alone and as the first stage of a Vulkan→Go pipeline.
func TestVulkanAgreesWithEngine(t *testing.T) {
	vulkanDevice(t)
	decode := []int32{50, 51, 300, 2}
	limit, mode := vulkanLimit()
	for _, name := range vulkanShapes {
		c := shapes[name]
		t.Run(name, func(t *testing.T) {
			path := gen(t, name, c, engine.F32)
			want := run(t, []engine.Stage{openLocal(t, path)}, decode)
			got := run(t, []engine.Stage{open(t, path, WithDevice(GPU))}, decode)
			split := run(t, []engine.Stage{open(t, path, WithDevice(GPU), WithRange(0, 1)), openLocal(t, path, engine.WithRange(1, c.Layers))}, decode)
			worst := 0.0
			for i := range want {
				d, ds := relDist(want[i], got[i]), relDist(want[i], split[i])
				worst = math.Max(worst, math.Max(d, ds))
				if !(d <= limit && ds <= limit) {
					t.Errorf("step %d: relative distance %.3g / %.3g from engine.Local, limit %.3g", i, d, ds, limit)
				}
			}
			t.Logf("F32, %s: largest distance from engine.Local %.3g (limit %.3g)", mode, worst, limit)
		})
	}
}

// TestVulkanQuantizedAgreesWithEngine: on Q8_0 and Q4_K_M files the
// oracle is the file's weights dequantized to F32 run through
// engine.Local (ref), as on the CPU device (TestQuantizedAgreesWithEngine).
// ggml-vulkan here has no integer dot products (Debian 12's glslc lacks
// GL_EXT_integer_dot_product), so it multiplies the dequantized weights by
// unquantized activations. With F32 kernels it must then land within the
// F32 limit of ref on the quantized file as on the dequantized one. With
// F16 staging it rounds the dequantized weights and the activations to
// F16, so its distance from ref, dVk, is held as the CPU test holds
// ggml's: within 2·dGo, engine.Local's own distance (it quantizes the
// activations to Q8_0 or Q8_K). The two engines, alone and as a Vulkan→Go
// pipeline, are held to the CPU test's bound, max(2·d, 1e-3), d the larger
// distance from ref.
func TestVulkanQuantizedAgreesWithEngine(t *testing.T) {
	vulkanDevice(t)
	limit, mode := vulkanLimit()
	decode := []int32{50, 51, 300, 2}
	type tc struct {
		name, kind string
		path       func(t *testing.T) string
		layers     int
	}
	cases := []tc{
		{"llama-gqa", "Q8_0", func(t *testing.T) string { return gen(t, "llama-gqa", shapes["llama-gqa"], engine.Q8_0) }, shapes["llama-gqa"].Layers},
		{"qwen3", "Q8_0", func(t *testing.T) string { return gen(t, "qwen3", shapes["qwen3"], engine.Q8_0) }, shapes["qwen3"].Layers},
		{"llama-gqa", "Q4_K_M", func(t *testing.T) string { return genMix(t, "llama-gqa", kShapes["llama-gqa"], "q4_k_m") }, kShapes["llama-gqa"].Layers},
		{"qwen3", "Q4_K_M", func(t *testing.T) string { return genMix(t, "qwen3", kShapes["qwen3"], "q4_k_m") }, kShapes["qwen3"].Layers},
	}
	for _, c := range cases {
		t.Run(c.name+"/"+c.kind, func(t *testing.T) {
			path := c.path(t)
			refPath := dequantized(t, path)
			ref := run(t, []engine.Stage{openLocal(t, refPath)}, decode)
			refV := run(t, []engine.Stage{open(t, refPath, WithDevice(GPU))}, decode)
			want := run(t, []engine.Stage{openLocal(t, path)}, decode)
			got := run(t, []engine.Stage{open(t, path, WithDevice(GPU))}, decode)
			split := run(t, []engine.Stage{open(t, path, WithDevice(GPU), WithRange(0, 1)), openLocal(t, path, engine.WithRange(1, c.layers))}, decode)
			f32 := f32Kernels()
			dVk, dGo := 0.0, 0.0
			for i := range ref {
				dF, dQ := relDist(ref[i], refV[i]), relDist(ref[i], got[i])
				if !(dF <= limit) || (f32 && !(dQ <= limit)) {
					t.Errorf("step %d: Vulkan is %.3g (dequantized F32 file) / %.3g (%s file) from the dequantized-F32 reference, limit %.3g",
						i, dF, dQ, c.kind, limit)
				}
				dVk = math.Max(dVk, dQ)
				dGo = math.Max(dGo, relDist(ref[i], want[i]))
			}
			if !(dVk <= 2*dGo) {
				t.Errorf("Vulkan is %.3g from the dequantized-F32 reference, engine %.3g: more than twice", dVk, dGo)
			}
			bound := math.Max(2*math.Max(dVk, dGo), 1e-3)
			worst := 0.0
			for i := range want {
				d, ds := relDist(want[i], got[i]), relDist(want[i], split[i])
				worst = math.Max(worst, math.Max(d, ds))
				if !(d <= bound && ds <= bound) {
					t.Errorf("step %d: relative distance %.3g / %.3g from engine.Local, bound %.3g", i, d, ds, bound)
				}
			}
			vkBound := 2 * dGo
			if f32 {
				vkBound = limit
			}
			t.Logf("%s, %s: from the dequantized-F32 reference: Vulkan %.3g (bound %.3g), engine %.3g; from engine.Local %.3g, bound %.3g",
				c.kind, mode, dVk, vkBound, dGo, worst, bound)
		})
	}
}

// storiesModel is the trained model the repository ships (llama2.c's
// stories260K).
const storiesModel = "../../testdata/models/stories260K.gguf"

// TestVulkanStories: on stories260K, a trained model (not random
// weights), the Vulkan stage's logits over a prompt and a greedy decode
// of 16 tokens are within vulkanLimit of engine.Local's at every step,
// and the greedy tokens are the same.
func TestVulkanStories(t *testing.T) {
	vulkanDevice(t)
	if _, err := os.Stat(storiesModel); err != nil {
		t.Fatal(err)
	}
	tok, err := engine.LoadTokenizer(storiesModel)
	if err != nil {
		t.Fatal(err)
	}
	limit, mode := vulkanLimit()
	ids := tok.Encode("Once upon a time", true, false)
	want := greedy(t, openLocal(t, storiesModel), ids, 16)
	got := greedy(t, open(t, storiesModel, WithDevice(GPU)), ids, 16)
	worst := 0.0
	for i := range want.logits {
		d := relDist(want.logits[i], got.logits[i])
		worst = math.Max(worst, d)
		if !(d <= limit) {
			t.Errorf("step %d: relative distance %.3g from engine.Local, limit %.3g", i, d, limit)
		}
	}
	if !slices.Equal(want.tokens, got.tokens) {
		t.Fatalf("greedy tokens %v on Vulkan, %v on engine.Local", got.tokens, want.tokens)
	}
	t.Logf("stories260K, %s: %d greedy tokens equal (%q); largest logits distance %.3g (limit %.3g)",
		mode, len(got.tokens), tok.Decode(got.tokens), worst, limit)
}

type greedyRun struct {
	tokens []int32
	logits [][]float32
}

// greedy prefills ids and then decodes n tokens greedily through one
// stage holding the whole model, feeding each step's argmax back.
func greedy(t *testing.T, s engine.Stage, ids []int32, n int) greedyRun {
	t.Helper()
	se, err := s.NewSession(len(ids) + n)
	if err != nil {
		t.Fatal(err)
	}
	defer se.Close()
	var r greedyRun
	step, pos := ids, 0
	for len(r.tokens) < n {
		out, err := s.Forward(t.Context(), engine.Step{Session: se, Tokens: step, Pos: pos})
		if err != nil {
			t.Fatalf("at %d: %v", pos, err)
		}
		pos += len(step)
		r.logits = append(r.logits, out.Logits)
		best := 0
		for i, v := range out.Logits {
			if v > out.Logits[best] {
				best = i
			}
		}
		r.tokens = append(r.tokens, int32(best))
		step = []int32{int32(best)}
	}
	return r
}

// TestVulkanBatchMatchesAlone: 16 sessions decoding together in one graph on
// the Vulkan device, through one stage and through two, get the logits
// each gets alone there. ggml picks its kernels by row count, so a batch
// may round otherwise: with F32 kernels within the F32 limit; with F16
// staging each run rounds operands to F16 by its own kernels, alone within
// vulkanLimit of engine.Local (checked here), so batched and alone are
// held to twice it.
func TestVulkanBatchMatchesAlone(t *testing.T) {
	vulkanDevice(t)
	limit, mode := vulkanLimit()
	bound := limit
	if !f32Kernels() {
		bound = 2 * limit
	}
	prompts, decode := batchSeqs()
	for _, name := range []string{"llama-gqa", "qwen3"} {
		c := shapes[name]
		t.Run(name, func(t *testing.T) {
			path := gen(t, name, c, engine.F32)
			alone := runSeqs(t, []engine.Stage{open(t, path, WithDevice(GPU))}, prompts, decode, false)
			exact := runSeqs(t, []engine.Stage{openLocal(t, path)}, prompts, decode, false)
			for j := range exact {
				for i := range exact[j] {
					if d := relDist(exact[j][i], alone[j][i]); !(d <= limit) {
						t.Errorf("sequence %d step %d: alone %.3g from engine.Local, limit %.3g", j, i, d, limit)
					}
				}
			}
			for _, layout := range []struct {
				name   string
				stages []engine.Stage
			}{
				{"one stage", []engine.Stage{open(t, path, WithDevice(GPU))}},
				{"two stages", []engine.Stage{open(t, path, WithDevice(GPU), WithRange(0, 1)), open(t, path, WithDevice(GPU), WithRange(1, c.Layers))}},
			} {
				got := runSeqs(t, layout.stages, prompts, decode, true)
				worst := 0.0
				for j := range alone {
					for i := range alone[j] {
						d := relDist(alone[j][i], got[j][i])
						worst = math.Max(worst, d)
						if !(d <= bound) {
							t.Errorf("%s: sequence %d step %d: batched logits %.3g from alone, bound %.3g", layout.name, j, i, d, bound)
						}
					}
				}
				t.Logf("%s, %s: batched vs alone, largest relative distance %.3g (bound %.3g)", layout.name, mode, worst, bound)
			}
		})
	}
}

// TestVulkanThreads: a stage's calls coming from several OS threads in
// turn, as a node's goroutines make them, give the results the same calls
// give from one thread. Before Stage ran a GPU's calls on one thread
// (deviceThread), this aborted the process within a few steps on
// lavapipe (glibc: "double free or corruption").
func TestVulkanThreads(t *testing.T) {
	vulkanDevice(t)
	path := gen(t, "llama-gqa", shapes["llama-gqa"], engine.F32)
	// Three goroutines locked to their threads take the calls in turn.
	var workers []chan func()
	for range 3 {
		ch := make(chan func())
		workers = append(workers, ch)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for f := range ch {
				f()
			}
		}()
	}
	defer func() {
		for _, ch := range workers {
			close(ch)
		}
	}()
	calls := 0
	spread := func(f func()) {
		done := make(chan struct{})
		workers[calls%len(workers)] <- func() { defer close(done); f() }
		calls++
		<-done
	}
	direct := func(f func()) { f() }
	// rounds opens a stage of the first layer and runs three sessions one
	// after another (a prefill and decode steps each, then Close), making
	// every call through on; it returns each step's hidden states.
	rounds := func(on func(func())) [][]float32 {
		var s *Stage
		on(func() { s = open(t, path, WithDevice(GPU), WithRange(0, 1)) })
		var out [][]float32
		for r := range 3 {
			var se engine.Session
			var err error
			on(func() { se, err = s.NewSession(32) })
			if err != nil {
				t.Fatal(err)
			}
			step := engine.Step{Session: se, Tokens: prompt}
			for i := range 8 {
				var o engine.Output
				on(func() { o, err = s.Forward(t.Context(), step) })
				if err != nil {
					t.Fatalf("round %d step %d: %v", r, i, err)
				}
				out = append(out, o.Hidden)
				step = engine.Step{Session: se, Tokens: []int32{int32(10*r + i)}, Pos: step.Pos + len(step.Tokens)}
			}
			on(func() { err = se.Close() })
		}
		on(func() { s.Close() })
		return out
	}
	want := rounds(direct)
	got := rounds(spread)
	limit, _ := vulkanLimit()
	for i := range want {
		if d := relDist(want[i], got[i]); !(d <= limit) {
			t.Errorf("step %d: hidden states %.3g apart from several threads and from one", i, d)
		}
	}
	t.Logf("%d steps over %d calls from %d threads in turn agree with one thread's", len(want), calls, len(workers))
}

// TestVulkanSub: views of a Vulkan stage (Sub) compute what Vulkan stages
// opened over the same layers do, and a view refuses work once its
// stage is closed.
func TestVulkanSub(t *testing.T) {
	vulkanDevice(t)
	c := shapes["llama-gqa"]
	c.Layers = 4
	path := gen(t, "llama-gqa", c, engine.F32)
	decode := []int32{8, 9, 10}
	ref := run(t, []engine.Stage{open(t, path, WithDevice(GPU), WithRange(0, 1)), open(t, path, WithDevice(GPU), WithRange(1, 3)),
		open(t, path, WithDevice(GPU), WithRange(3, 4))}, decode)
	whole := open(t, path, WithDevice(GPU))
	var views []engine.Stage
	for _, r := range [][2]int{{0, 1}, {1, 3}, {3, 4}} {
		v, err := whole.Sub(r[0], r[1])
		if err != nil {
			t.Fatal(err)
		}
		defer v.Close()
		views = append(views, v)
	}
	got := run(t, views, decode)
	limit, _ := vulkanLimit()
	for i := range ref {
		if d := relDist(ref[i], got[i]); !(d <= limit) {
			t.Errorf("step %d: views differ from split stages by %.3g relative", i, d)
		}
	}
	whole.Close()
	if _, err := views[1].NewSession(8); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("a view of a closed stage: %v, want ErrClosed", err)
	}
}
