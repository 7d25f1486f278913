// Command llamabench is `make bench-llamacpp`: it compares Strata's engine
// with llama.cpp's own prebuilt CPU build (node-llama-cpp's, run by
// engine/testdata/llamacpp-bench/bench.mjs) on the same GGUF files in the
// same run, and prints a markdown table of tok/s with the ratio
// Strata/llama.cpp.
//
//	llamabench drive [flags]     the whole comparison (what make runs)
//	llamabench measure [flags]   one Strata measurement, one line of JSON
//	llamabench membw [flags]     memory read bandwidth, one line of JSON
//
// Every measurement runs in a process of its own, so that one side's
// weights (8.5 GB for a Llama-3-8B Q8_0) are freed before the other side
// loads the file, and the runs alternate: Strata, llama.cpp, Strata,
// llama.cpp, ...; the table shows the median of each side's runs.
//
// It is a benchmark, not part of the product: nothing imports it, and
// neither make test nor CI runs it.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/internal/benchrun"
	"github.com/stratanet/strata/engine/internal/membench"

	"github.com/stratanet/strata/internal/stats"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: llamabench drive|measure|membw [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "drive":
		err = drive(os.Args[2:])
	case "measure":
		err = measureCmd(os.Args[2:])
	case "membw":
		err = membwCmd(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (drive, measure or membw)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "llamabench:", err)
		os.Exit(1)
	}
}

// Result is one measurement, as both sides print it.
type Result = benchrun.Result

const (
	modeDecode  = benchrun.Decode
	modePrefill = benchrun.Prefill
	modeBatch16 = benchrun.Batch16
)

func measureCmd(args []string) error {
	fs := flag.NewFlagSet("measure", flag.ExitOnError)
	model := fs.String("model", "", "GGUF file")
	threads := fs.Int("threads", 1, "engine threads (engine.WithThreads)")
	mode := fs.String("mode", modeDecode, "decode, prefill or batch16")
	steps := fs.Int("steps", 64, "decode: tokens timed; batch16: decode steps timed")
	prompt := fs.Int("prompt", 16, "decode and batch16: prompt tokens per session")
	n := fs.Int("tokens", 512, "prefill: prompt tokens")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run (load and timed region) to this file")
	fs.Parse(args)
	// Loading converts the weights into new buffers, and at GOGC's default
	// the garbage of a big file's load is collected late: a 5 GB
	// qwen3moe file peaked at 8.9 GB resident, 5.6 GB under a limit. A
	// soft limit a little under the memory available lets a file that
	// fits load; it does not slow the timed region, which allocates
	// little. GOMEMLIMIT, when set, wins.
	if os.Getenv("GOMEMLIMIT") == "" {
		if avail := memAvailable(); avail > 0 {
			debug.SetMemoryLimit(avail / 10 * 9)
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	r, err := measure(*model, *threads, *mode, *steps, *prompt, *n)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// memAvailable is /proc/meminfo's MemAvailable in bytes, or 0.
func memAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			var kb int64
			if _, err := fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// measure loads the model into engine.Local and times one mode.
func measure(path string, threads int, mode string, steps, promptLen, n int) (Result, error) {
	s, err := engine.Open(path, engine.WithThreads(threads))
	if err != nil {
		return Result{}, err
	}
	defer s.Close()
	r, err := benchrun.Run(s, path, mode, steps, promptLen, n)
	r.Engine = "strata"
	return r, err
}

// BW is the memory read bandwidth of one membw run: its fastest read, and
// all its reads' bytes over their time.
type BW struct {
	Threads         int     `json:"threads"`
	Bytes           int     `json:"bytes"`
	BytesPerSec     float64 `json:"bytes_per_s"`
	MeanBytesPerSec float64 `json:"mean_bytes_per_s"`
}

func membwCmd(args []string) error {
	fs := flag.NewFlagSet("membw", flag.ExitOnError)
	mib := fs.Int("mib", 1024, "buffer size in MiB (much bigger than the caches)")
	threads := fs.Int("threads", 1, "threads reading at once")
	reps := fs.Int("reps", 5, "reads of the buffer; the fastest counts")
	fs.Parse(args)
	buf := membench.Buffer(*mib << 20 / 8)
	membench.Read(buf, *threads) // warm-up
	best, all, n := time.Duration(1<<62), time.Duration(0), 0
	for range *reps {
		t0 := time.Now()
		n = membench.Read(buf, *threads)
		d := time.Since(t0)
		best, all = min(best, d), all+d
	}
	return json.NewEncoder(os.Stdout).Encode(BW{Threads: *threads, Bytes: n, BytesPerSec: float64(n) / best.Seconds(),
		MeanBytesPerSec: float64(n**reps) / all.Seconds()})
}

// A benchFile is one generated model file of the comparison.
type benchFile struct {
	shape, dtype string
	gen          []string // strata model gen's shape flags
	// decodeOnly: only the decode rows; the other modes would take
	// minutes a run on a 30B-parameter file and 2 cores.
	decodeOnly bool
}

func (f benchFile) name() string { return f.shape + "-" + f.dtype + ".gguf" }

var (
	tinyShape = []string{"--layers", "22", "--dim", "2048", "--heads", "32", "--kv-heads", "4", "--ffn", "5632", "--vocab", "32000"}
	l3Shape   = []string{"--layers", "32", "--dim", "4096", "--heads", "32", "--kv-heads", "8", "--ffn", "14336", "--vocab", "128256"}
	// Qwen3-30B-A3B's config.json: 48 layers, hidden 2048, 32 heads of 128
	// (so Q is 4096 wide), 4 KV heads, 128 experts of 768, 8 a token,
	// intermediate_size 6144 (written as feed_forward_length only).
	moeShape = []string{"--arch", "qwen3moe", "--layers", "48", "--dim", "2048", "--heads", "32", "--kv-heads", "4", "--head-dim", "128",
		"--experts", "128", "--experts-used", "8", "--expert-ffn", "768", "--ffn", "6144", "--vocab", "151936"}
	shapes = map[string][]benchFile{
		"tiny":          {{"tiny", "q4_k_m", tinyShape, false}, {"tiny", "q8_0", tinyShape, false}, {"tiny", "f16", tinyShape, false}},
		"8b":            {{"llama3-8b", "q4_k_m", l3Shape, false}, {"llama3-8b", "q8_0", l3Shape, false}},
		"qwen3-30b-a3b": {{"qwen3-30b-a3b", "q4_k_m", moeShape, true}},
	}
)

// A metric is one row of the table for each file.
type metric struct {
	label string
	// key names the metric for -metrics: the mode, or "ctx" for decode
	// at a long position.
	key     string
	mode    string
	threads int
	// steps or tokens, prompt: the mode's sizes.
	steps, prompt int
	tinyOnly      bool // too slow to repeat on the 8B shape
}

// The names -metrics takes. ctx (decode at long positions) is not in the
// default set: filling 8,192 positions takes minutes a run on 2 cores.
const metricCtx = "ctx"

var (
	metricNames    = []string{modeDecode, modePrefill, modeBatch16, metricCtx}
	defaultMetrics = []string{modeDecode, modePrefill, modeBatch16}
)

func metrics(decodeSteps, batchSteps, prefillTokens, ctxSteps int, positions []int) []metric {
	ms := []metric{
		{fmt.Sprintf("decode t=1 (%d tok after %d)", decodeSteps, 16), modeDecode, modeDecode, 1, decodeSteps, 16, false},
		{fmt.Sprintf("decode t=2 (%d tok after %d)", decodeSteps, 16), modeDecode, modeDecode, 2, decodeSteps, 16, false},
		{fmt.Sprintf("prefill %d t=2", prefillTokens), modePrefill, modePrefill, 2, prefillTokens, 0, false},
		{fmt.Sprintf("prefill %d t=1", prefillTokens), modePrefill, modePrefill, 1, prefillTokens, 0, true},
		{fmt.Sprintf("16 seqs t=2 (%d steps, aggregate)", batchSteps), modeBatch16, modeBatch16, 2, batchSteps, 8, false},
	}
	// Decode after a prompt of P tokens: the same decode mode, the prompt
	// (untimed) filling the KV cache to P first.
	for _, threads := range []int{1, 2} {
		for _, p := range positions {
			ms = append(ms, metric{fmt.Sprintf("decode t=%d (%d tok after %d)", threads, ctxSteps, p), metricCtx, modeDecode, threads, ctxSteps, p, false})
		}
	}
	return ms
}

// ErrFlag is a bad value of a drive flag.
var ErrFlag = errors.New("bad flag")

// parseMetrics reads -metrics: names from metricNames, or the default set
// when empty.
func parseMetrics(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return defaultMetrics, nil
	}
	var out []string
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if !slices.Contains(metricNames, name) {
			return nil, fmt.Errorf("%w: -metrics %q: unknown metric %q (%s)", ErrFlag, s, name, strings.Join(metricNames, ", "))
		}
		out = append(out, name)
	}
	return out, nil
}

// parsePositions reads -ctx-positions: positive token counts.
func parsePositions(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		var p int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &p); err != nil || p <= 0 || fmt.Sprint(p) != strings.TrimSpace(f) {
			return nil, fmt.Errorf("%w: -ctx-positions %q: %q is not a positive number of tokens", ErrFlag, s, f)
		}
		out = append(out, p)
	}
	return out, nil
}

// selected says whether metric m runs on file f, given -metrics (parsed),
// -threads (empty: all) and -shape's file kinds.
func selected(m metric, f benchFile, only []string, threadList string) bool {
	// A small-shape-only row runs on the others when -threads names it.
	if m.tinyOnly && f.shape != "tiny" && threadList == "" || f.decodeOnly && m.mode != modeDecode {
		return false
	}
	if !slices.Contains(only, m.key) {
		return false
	}
	return threadList == "" || slices.Contains(strings.Split(threadList, ","), fmt.Sprint(m.threads))
}

func drive(args []string) error {
	fs := flag.NewFlagSet("drive", flag.ExitOnError)
	dir := fs.String("models", "bin/bench-models", "directory of the generated files (made once, reused)")
	shapeList := fs.String("shapes", "tiny,8b", "shapes to compare: tiny (TinyLlama 1.1B's), 8b (Llama-3-8B's), qwen3-30b-a3b (Qwen3-30B-A3B's, decode only)")
	layers := fs.Int("layers", 0, "if > 0, the shapes' files get this many of their layers (the same per-layer shape; the file is named NofML)")
	runs := fs.Int("runs", 3, "alternating runs per side and metric; the median counts")
	strata := fs.String("strata", "bin/strata", "the strata binary (model gen)")
	node := fs.String("node", "node", "node")
	script := fs.String("script", "engine/testdata/llamacpp-bench/bench.mjs", "llama.cpp's side")
	out := fs.String("out", "bin/bench-llamacpp.txt", "where the report is saved as well")
	decodeSteps := fs.Int("decode-steps", 64, "decode: tokens timed (halved on the 8B shape)")
	batchSteps := fs.Int("batch-steps", 32, "16 sequences: decode steps timed (halved on the 8B shape)")
	prefillTokens := fs.Int("prefill", 512, "prefill: prompt tokens")
	only := fs.String("metrics", "", "comma-separated metrics to run (decode,prefill,batch16,ctx); empty: decode,prefill,batch16 (ctx, decode at -ctx-positions, only when named)")
	ctxSteps := fs.Int("ctx-steps", 32, "ctx: tokens timed after each long prompt (halved on the 8B shape)")
	ctxPositions := fs.String("ctx-positions", "2048,8192", "ctx: the prompt lengths (positions) decode is timed at")
	dtypes := fs.String("dtypes", "", "comma-separated weight types of the shapes' files to run (q4_k_m,q8_0,f16); empty: all")
	ggmlBin := fs.String("ggml", "", "engine/ggml's ggml-bench binary, or several comma-separated (builds of it to compare in the same run): also measure the ggml engine (make bench-ggml-llamacpp builds it)")
	goSide := fs.Bool("go", true, "measure the pure-Go engine")
	threadList := fs.String("threads", "", "comma-separated thread counts of the metrics to run (1,2); empty: all (given, it also runs the 1-thread prefill on the 8B shape)")
	quiet := fs.Duration("quiet", 20*time.Second, "before each measurement, wait up to this long for the other processes on the machine to use less than a quarter of a core")
	fs.Parse(args)
	onlyList, err := parseMetrics(*only)
	if err != nil {
		return err
	}
	positions, err := parsePositions(*ctxPositions)
	if err != nil {
		return err
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	var files []benchFile
	for _, sh := range strings.Split(*shapeList, ",") {
		fl, ok := shapes[strings.TrimSpace(sh)]
		if !ok {
			return fmt.Errorf("unknown shape %q (tiny, 8b, qwen3-30b-a3b)", sh)
		}
		for _, f := range fl {
			if *dtypes == "" || slices.Contains(strings.Split(*dtypes, ","), f.dtype) {
				if *layers > 0 {
					var err error
					if f, err = withLayers(f, *layers); err != nil {
						return err
					}
				}
				files = append(files, f)
			}
		}
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		if err := ensureFile(*strata, *dir, f); err != nil {
			return err
		}
	}

	var report bytes.Buffer
	w := io.MultiWriter(os.Stdout, &report)
	fmt.Fprintf(w, "# Strata vs llama.cpp (node-llama-cpp 3.22.1 prebuilt CPU), %s\n\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "machine: %s, %d CPUs (GOMAXPROCS %d), %s/%s\n", cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "runs: %d per side, the sides alternating, each measurement in its own process; median shown\n\n", *runs)

	// sides are the engines measured, in the order each run alternates them.
	type side struct {
		name string
		run  func(mode string, threads int, path string, steps, prompt int) (Result, error)
	}
	var sides []side
	strataArgs := func(mode string, threads int, path string, steps, prompt int) []string {
		args := []string{"measure", "-model", path, "-threads", fmt.Sprint(threads), "-mode", mode}
		if mode == modePrefill {
			return append(args, "-tokens", fmt.Sprint(steps))
		}
		return append(args, "-steps", fmt.Sprint(steps), "-prompt", fmt.Sprint(prompt))
	}
	if *goSide {
		sides = append(sides, side{"Strata", func(mode string, threads int, path string, steps, prompt int) (Result, error) {
			return runJSON(self, strataArgs(mode, threads, path, steps, prompt)...)
		}})
	}
	if *ggmlBin != "" {
		bins := strings.Split(*ggmlBin, ",")
		for _, bin := range bins {
			name := "ggml engine"
			if len(bins) > 1 {
				name += " (" + filepath.Base(bin) + ")"
			}
			sides = append(sides, side{name, func(mode string, threads int, path string, steps, prompt int) (Result, error) {
				return runJSON(bin, strataArgs(mode, threads, path, steps, prompt)...)
			}})
		}
	}
	if len(sides) == 0 {
		return errors.New("nothing to compare with llama.cpp: -go=false and no -ggml")
	}
	sides = append(sides, side{"llama.cpp", func(mode string, threads int, path string, steps, prompt int) (Result, error) {
		args := []string{*script, path, fmt.Sprint(threads), mode, fmt.Sprint(steps)}
		if mode != modePrefill {
			args = append(args, fmt.Sprint(prompt))
		}
		return runJSON(*node, args...)
	}})
	llama := len(sides) - 1

	var rows []row
	variants := make([]string, len(sides))
	for _, f := range files {
		path := filepath.Join(*dir, f.name())
		bw, err := membw(self)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "== %s (memory read bandwidth, 1 thread: %.2f GB/s)\n", f.name(), bw.BytesPerSec/1e9)
		for _, m := range metrics(*decodeSteps, *batchSteps, *prefillTokens, *ctxSteps, positions) {
			if !selected(m, f, onlyList, *threadList) {
				continue
			}
			steps := m.steps
			if f.shape != "tiny" && m.mode != modePrefill {
				steps = max(1, steps/2)
			}
			label := m.label
			if steps != m.steps {
				label = strings.Replace(label, fmt.Sprint(m.steps), fmt.Sprint(steps), 1)
			}
			rw := row{file: f.name(), metric: label, decode1: m.key == modeDecode && m.threads == 1, ctx: m.key == metricCtx,
				rates: make([][]float64, len(sides)), loads: make([][]float64, len(sides)), peakRSS: make([]int64, len(sides)), kv: make([]string, len(sides))}
			for run := range *runs {
				var line strings.Builder
				for i, sd := range sides {
					waitQuiet(*quiet)
					if rw.decode1 && sd.name == "Strata" {
						// A read beside each run: the host's bandwidth drifts
						// by tens of percent in an hour.
						b, err := membw(self)
						if err != nil {
							return err
						}
						rw.reads = append(rw.reads, b)
					}
					r, err := sd.run(m.mode, m.threads, path, steps, m.prompt)
					if err != nil {
						return fmt.Errorf("%s %s %s: %w", sd.name, f.name(), label, err)
					}
					rw.others = max(rw.others, r.OthersLoad)
					rw.rates[i] = append(rw.rates[i], r.TokS)
					rw.loads[i] = append(rw.loads[i], r.OthersLoad)
					rw.peakRSS[i] = max(rw.peakRSS[i], r.PeakRSS)
					if sd.name == "Strata" {
						rw.weightBytes = r.WeightBytes
					}
					if r.CPUVariant != "" {
						variants[i] = r.CPUVariant
					}
					if d := kvDesc(r); d != "" {
						rw.kv[i] = d
					}
					fmt.Fprintf(&line, "  %s %8.2f tok/s (others' load %.2f, peak RSS %.2f GB)", sd.name, r.TokS, r.OthersLoad, float64(r.PeakRSS)/1e9)
				}
				fmt.Fprintf(os.Stderr, "   %-36s run %d:%s\n", label, run+1, line.String())
			}
			rows = append(rows, rw)
		}
	}

	for i, sd := range sides {
		if variants[i] != "" {
			fmt.Fprintf(w, "%s's ggml CPU kernels: %s\n", sd.name, variants[i])
		}
	}
	fmt.Fprintln(w)
	head, rule := "| file | metric |", "|---|---|"
	for _, sd := range sides {
		head += " " + sd.name + " tok/s |"
		rule += "---:|"
	}
	for _, sd := range sides[:llama] {
		head += " " + sd.name + "/llama.cpp |"
		rule += "---:|"
	}
	fmt.Fprintln(w, head+" runs |"+" others' load |")
	fmt.Fprintln(w, rule+"---|---:|")
	names := make([]string, len(sides))
	for i, sd := range sides {
		names[i] = sd.name
	}
	for _, r := range rows {
		fmt.Fprintln(w, tableLine(r, names))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "others' load: the most CPU, in cores, that processes other than the measured one used during any run of the row")
	fmt.Fprintln(w, "(from /proc/stat; the machine has", runtime.NumCPU(), "CPUs). Above about 0.3 a row's numbers are disturbed.")
	fmt.Fprintln(w, "runs: each run's tok/s @ others' load during it.")
	// The KV caches of the long-context rows, where the sides differ most.
	var kvLines []string
	for _, r := range rows {
		var parts []string
		for i, sd := range sides {
			if r.kv[i] != "" {
				parts = append(parts, sd.name+" "+r.kv[i])
			}
		}
		if len(parts) > 0 && r.ctx {
			kvLines = append(kvLines, fmt.Sprintf("- %s, %s: %s", r.file, r.metric, strings.Join(parts, "; ")))
		}
	}
	if len(kvLines) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "KV cache of the long-context decode rows (type, positions it holds, llama.cpp's flash attention as it resolved \"auto\"):")
		fmt.Fprintln(w)
		for _, l := range kvLines {
			fmt.Fprintln(w, l)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Peak resident memory of the measuring processes (ru_maxrss, the most of a row's runs), GB:")
	fmt.Fprintln(w)
	for _, r := range rows {
		var parts []string
		for i, sd := range sides {
			parts = append(parts, fmt.Sprintf("%s %.2f", sd.name, float64(r.peakRSS[i])/1e9))
		}
		fmt.Fprintf(w, "- %s, %s: %s\n", r.file, r.metric, strings.Join(parts, ", "))
	}
	if *goSide && slices.ContainsFunc(rows, func(r row) bool { return r.decode1 }) {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Decode at 1 thread against memory read bandwidth (membench.Read, 1 thread, 1 GiB buffer, 5 reads just before each of Strata's runs).")
		fmt.Fprintln(w, "A run's fraction sets the weights it read per second, over its whole run, against its reads' bytes over their whole time (average against average),")
		fmt.Fprintln(w, "and against the fastest of its reads; each column is the median of the runs:")
		fmt.Fprintln(w)
		moeNote := false
		fmt.Fprintln(w, "| file | Strata weight bytes read/token | read GB/s, average | read GB/s, fastest | Strata decode t=1 tok/s | weights read GB/s | fraction of the average read | fraction of the fastest read |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
		for _, r := range rows {
			if !r.decode1 {
				continue
			}
			s := stats.Median(r.rates[0])
			wb := r.weightBytes
			if tb, moe, err := tokenBytes(filepath.Join(*dir, r.file)); err != nil {
				return err
			} else if moe {
				// Experts: a token reads its experts' share, not all the
				// weights the stage holds.
				wb, moeNote = tb, true
			}
			var mean, best, fMean, fBest []float64
			for i, b := range r.reads {
				mean, best = append(mean, b.MeanBytesPerSec), append(best, b.BytesPerSec)
				fMean = append(fMean, float64(wb)*r.rates[0][i]/b.MeanBytesPerSec)
				fBest = append(fBest, float64(wb)*r.rates[0][i]/b.BytesPerSec)
			}
			fmt.Fprintf(w, "| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", r.file, wb, stats.Median(mean)/1e9, stats.Median(best)/1e9,
				s, float64(wb)*s/1e9, stats.Median(fMean), stats.Median(fBest))
		}
		if moeNote {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "On a mixture-of-experts file the weight bytes are the file's bytes a token reads: every tensor but the experts and the token embeddings, expert_used_count/expert_count of the experts and one row of the embeddings.")
		}
	}
	if *out != "" {
		if err := os.WriteFile(*out, report.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "saved to %s\n", *out)
	}
	return nil
}

// A row is one metric of one file: each side's runs.
type row struct {
	file, metric string
	rates        [][]float64 // per side, per run
	loads        [][]float64 // others' load during each of those runs
	peakRSS      []int64     // per side, the most of its runs
	weightBytes  int64       // the pure-Go engine's
	decode1      bool
	reads        []BW // decode1: a read just before each of the pure-Go engine's runs
	others       float64
	// kv: per side, the KV cache a decode ran with ("" for other modes).
	kv  []string
	ctx bool // a -metrics ctx row
}

// tableLine is r's line of the markdown table: each side's median tok/s
// (sides' order; the last is llama.cpp), each other side's ratio to
// llama.cpp's, each run's rate and load, and the most others' load.
func tableLine(r row, sides []string) string {
	var b strings.Builder
	llama := len(sides) - 1
	fmt.Fprintf(&b, "| %s | %s |", r.file, r.metric)
	for i := range sides {
		fmt.Fprintf(&b, " %.2f |", stats.Median(r.rates[i]))
	}
	for i := range sides[:llama] {
		fmt.Fprintf(&b, " %.2f |", stats.Median(r.rates[i])/stats.Median(r.rates[llama]))
	}
	var runsCol []string
	for i, name := range sides {
		runsCol = append(runsCol, name+": "+listLoads(r.rates[i], r.loads[i]))
	}
	fmt.Fprintf(&b, " %s | %.2f |", strings.Join(runsCol, "; "), r.others)
	return b.String()
}

// kvDesc describes one side's KV cache from a decode's result.
func kvDesc(r Result) string {
	if r.KVType == "" {
		return ""
	}
	d := fmt.Sprintf("%s, %d positions", r.KVType, r.KVContext)
	if r.FlashAttention != nil {
		d += fmt.Sprintf(", flash attention %v", map[bool]string{true: "on", false: "off"}[*r.FlashAttention])
	}
	return d
}

// withLayers gives f n of its layers, named "SHAPE-NofML": the same
// per-layer shape, where the whole file would not fit in memory.
func withLayers(f benchFile, n int) (benchFile, error) {
	i := slices.Index(f.gen, "--layers")
	if i < 0 || i+1 >= len(f.gen) {
		return f, fmt.Errorf("shape %s has no --layers", f.shape)
	}
	var full int
	if _, err := fmt.Sscan(f.gen[i+1], &full); err != nil || n > full {
		return f, fmt.Errorf("-layers %d: shape %s has %s layers", n, f.shape, f.gen[i+1])
	}
	if n == full {
		return f, nil
	}
	f.gen = slices.Clone(f.gen)
	f.gen[i+1] = fmt.Sprint(n)
	f.shape = fmt.Sprintf("%s-%dof%dL", f.shape, n, full)
	return f, nil
}

// tokenBytes is, for a mixture-of-experts file, the bytes of its tensors
// that one token reads: all but the experts, and the chosen experts' share
// of those (as strata model inspect counts them); moe is false otherwise.
func tokenBytes(path string) (n int64, moe bool, err error) {
	f, fh, err := engine.OpenFile(path)
	if err != nil {
		return 0, false, err
	}
	defer fh.Close()
	hp, err := engine.ReadHParams(f)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", path, err)
	}
	if !hp.MoE() {
		return 0, false, nil
	}
	var all, experts, embd int64
	tied := true
	for _, t := range f.Tensors {
		all += t.Size
		switch {
		case strings.Contains(t.Name, "_exps."):
			experts += t.Size
		case t.Name == "token_embd.weight":
			embd = t.Size
		case t.Name == "output.weight":
			tied = false
		}
	}
	if !tied { // a token reads one row of the embeddings (engine.Info's StepBytes)
		all -= embd - embd/int64(hp.Vocab)
	}
	return all - experts + experts*int64(hp.ExpertsUsed)/int64(hp.Experts), true, nil
}

// ensureFile generates f into dir with strata model gen unless it is there.
func ensureFile(strata, dir string, f benchFile) error {
	path := filepath.Join(dir, f.name())
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	tmp := filepath.Join(dir, "partial-"+f.name())
	args := append([]string{"model", "gen", "--out", tmp, "--dtype", f.dtype}, f.gen...)
	fmt.Fprintf(os.Stderr, "generating %s: %s %s\n", path, strata, strings.Join(args, " "))
	cmd := exec.Command(strata, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("generating %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

func membw(self string) (BW, error) {
	var b BW
	out, err := exec.Command(self, "membw").Output()
	if err != nil {
		return b, fmt.Errorf("membw: %w", exitErr(err))
	}
	if err := json.Unmarshal(out, &b); err != nil {
		return b, fmt.Errorf("membw: %w: %q", err, out)
	}
	return b, nil
}

// runJSON runs one measurement process and reads the last JSON line it
// printed. Result.OthersLoad is the CPU that processes other than it used
// meanwhile, in cores.
func runJSON(name string, args ...string) (Result, error) {
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	busy0, t0 := cpuBusy(), time.Now()
	out, err := cmd.Output()
	others := -1.0
	if busy0 >= 0 && cmd.ProcessState != nil {
		if busy1 := cpuBusy(); busy1 >= 0 {
			own := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
			others = max(0, (busy1-busy0-own)/time.Since(t0).Seconds())
		}
	}
	if err != nil {
		return Result{}, fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), exitErr(err), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var r Result
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		return r, fmt.Errorf("%s: %w: %q", name, err, out)
	}
	if !(r.TokS > 0) {
		return r, fmt.Errorf("%s: no tok/s in %q", name, out)
	}
	r.OthersLoad = others
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.PeakRSS = ru.Maxrss << 10 // KiB on Linux
	}
	return r, nil
}

// cpuBusy is the CPU time, in seconds, that the machine has spent outside
// idle and iowait since boot (/proc/stat), or -1 where it cannot be read.
func cpuBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return -1
	}
	var busy float64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is in user already
			continue
		}
		var x float64
		fmt.Sscan(v, &x)
		busy += x
	}
	return busy / 100 // USER_HZ
}

// waitQuiet waits, up to limit, until the processes of others use less
// than 0.25 of a core over a second, and returns their load at the end.
func waitQuiet(limit time.Duration) float64 {
	deadline := time.Now().Add(limit)
	for {
		b0, t0 := cpuBusy(), time.Now()
		time.Sleep(time.Second)
		b1 := cpuBusy()
		if b0 < 0 || b1 < 0 {
			return -1
		}
		load := (b1 - b0) / time.Since(t0).Seconds()
		if load < 0.25 || time.Now().After(deadline) {
			return load
		}
	}
}

func exitErr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, ee.Stderr)
	}
	return err
}

// listLoads is each run's rate with others' load during it: 99.9@0.02.
func listLoads(v, load []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.1f@%.2f", x, load[i])
	}
	return strings.Join(parts, " ")
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}
