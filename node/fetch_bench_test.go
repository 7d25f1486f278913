//go:build unix

package node

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/swarm"
	"github.com/stratanet/strata/swarm/chunks"
)

// BenchmarkUploaderLatency: the per-token latency of a node serving the
// whole model while a peer fetches the model's chunks from it in a loop,
// with no upload cap and with caps, against the same node idle. The modes
// take turns within each iteration, so that drift of the machine's load
// falls on all of them alike. Reported per mode: ns/token, the ratio to
// idle (x_idle; the goal is at most 1.10 under a cap) and the MB/s the
// peer got. The uploader's CPU time per token (this process's, from
// getrusage: generation plus serving chunks) is reported too, as
// <mode>_cpu_ms/token.
//
// With STRATA_FETCH_PROCESS=1 the fetching peer runs in a child process
// (this test binary again, see TestFetchHelperProcess), so that on a
// machine with cores to spare its hashing and copying do not compete with
// the uploader's goroutines in one Go runtime: what is left is the cost of
// uploading itself.
//
// Figures on the 2-core shared dev VM (Nov 26, three runs, -benchtime
// 3x/4x, one with the fetcher in-process): wall ns/token swings 3x between
// runs (idle 2.9 to 17.8 ms/token) under the other jobs' load, so x_idle
// says nothing there. CPU per token is steadier: idle 1.5-2.1 ms, capped
// at 5 MB/s 0.73-1.04x idle, at 20 MB/s 0.85-1.51x, uncapped 1.26-2.2x
// (35-151 MB/s). Only the 5 MB/s cap stayed within 1.10x in every run;
// that is too few runs on too noisy a machine to make it the default, so
// the default stays "no limit" (operators set --upload-rate) until a
// dedicated machine measures it.
func BenchmarkUploaderLatency(b *testing.B) {
	separate := os.Getenv("STRATA_FETCH_PROCESS") == "1"
	const perTurn, maxTokens = 2, 16
	// A model wider than the tests' (256 wide, about 20 MB), so that a
	// token costs compute as a real one does and not only hand-offs.
	cfg := engine.DefaultGenConfig()
	cfg.Layers, cfg.Dim, cfg.FFN, cfg.Seed = 8, 256, 640, 9
	path := filepath.Join(b.TempDir(), "wide.gguf")
	if err := engine.GenerateFile(path, cfg); err != nil {
		b.Fatal(err)
	}
	c := newTestCluster(b, WithChunkSize(chunks.MinChunkSize), WithLogger(nil))
	n := c.add(WithModelFile(path))
	c.waitServing(30*time.Second, n.ID())
	man, err := chunks.BuildFile(path, chunks.WithChunkSize(chunks.MinChunkSize))
	if err != nil {
		b.Fatal(err)
	}
	all := make([]int, man.NumChunks())
	for i := range all {
		all[i] = i
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	h, err := swarm.New(ctx, swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"), swarm.WithDiscovery(false))
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	if err := h.Libp2p().Connect(ctx, n.Host().AddrInfo()); err != nil {
		b.Fatal(err)
	}
	gen := func() int {
		res, err := n.Complete(ctx, Request{Prompt: benchPrompt, MaxTokens: maxTokens, Sampling: greedy})
		if err != nil {
			b.Fatal(err)
		}
		return len(res.Tokens)
	}
	for range 20 { // warm-up
		gen()
	}
	type mode struct {
		name   string
		fetch  bool
		rate   int64
		took   time.Duration
		tokens int
		bytes  int64
		cpu    time.Duration
	}
	modes := []*mode{{name: "idle"}, {name: "uncapped", fetch: true}, {name: "cap20MBps", fetch: true, rate: 20e6},
		{name: "cap5MBps", fetch: true, rate: 5e6}}
	b.ResetTimer()
	for range b.N {
		for _, m := range modes {
			n.chunks.SetUploadRate(m.rate)
			fctx, stop := context.WithCancel(ctx)
			var got atomic.Int64
			var wg sync.WaitGroup
			var child *fetchChild
			if m.fetch && separate {
				child = startFetchChild(b, path, n.Host().AddrInfo())
			} else if m.fetch {
				f := chunks.NewFetcher(h.Libp2p(), man)
				wg.Go(func() {
					for fctx.Err() == nil {
						f.Fetch(fctx, all, []peer.ID{n.ID()}, func(_ int, data []byte) error { //nolint:errcheck // ends with fctx
							got.Add(int64(len(data)))
							return nil
						})
					}
				})
			}
			start, cpu0 := time.Now(), cpuTime()
			for range perTurn {
				m.tokens += gen()
			}
			m.took += time.Since(start)
			m.cpu += cpuTime() - cpu0
			stop()
			wg.Wait()
			m.bytes += got.Load()
			if child != nil {
				m.bytes += child.stop(b)
			}
		}
	}
	b.StopTimer()
	n.chunks.SetUploadRate(0)
	idle := modes[0].took.Seconds() / float64(max(modes[0].tokens, 1))
	for _, m := range modes {
		per := m.took.Seconds() / float64(max(m.tokens, 1))
		b.ReportMetric(per*1e9, m.name+"_ns/token")
		b.ReportMetric(m.cpu.Seconds()*1e3/float64(max(m.tokens, 1)), m.name+"_cpu_ms/token")
		if m.fetch {
			b.ReportMetric(per/idle, m.name+"_x_idle")
			b.ReportMetric(float64(m.bytes)/1e6/m.took.Seconds(), m.name+"_MB/s")
		}
	}
}

// cpuTime is this process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fetchChild is a fetching peer in a child process.
type fetchChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

// startFetchChild starts the child and waits until it fetches.
func startFetchChild(b *testing.B, model string, ai peer.AddrInfo) *fetchChild {
	b.Helper()
	addrs, err := peer.AddrInfoToP2pAddrs(&ai)
	if err != nil || len(addrs) == 0 {
		b.Fatal(addrs, err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFetchHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "STRATA_FETCH_HELPER="+model+"|"+addrs[0].String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	c := &fetchChild{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	for c.out.Scan() {
		if c.out.Text() == "fetching" {
			return c
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	b.Fatalf("fetch child did not start: %v", c.out.Err())
	return nil
}

// stop ends the child and returns the bytes it fetched since "fetching".
func (c *fetchChild) stop(b *testing.B) int64 {
	b.Helper()
	c.stdin.Close()
	var n int64
	for c.out.Scan() {
		if v, ok := strings.CutPrefix(c.out.Text(), "bytes "); ok {
			n, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if err := c.cmd.Wait(); err != nil {
		b.Fatalf("fetch child: %v", err)
	}
	return n
}

// TestFetchHelperProcess is the fetching peer of BenchmarkUploaderLatency
// in a child process; it does nothing in a normal test run. It fetches
// every chunk of the model from the node in a loop until its stdin
// closes, then prints the bytes it got.
func TestFetchHelperProcess(t *testing.T) {
	env := os.Getenv("STRATA_FETCH_HELPER")
	if env == "" {
		t.Skip("the fetching peer of BenchmarkUploaderLatency (STRATA_FETCH_PROCESS=1)")
	}
	model, addr, _ := strings.Cut(env, "|")
	ai, err := peer.AddrInfoFromString(addr)
	if err != nil {
		t.Fatal(err)
	}
	man, err := chunks.BuildFile(model, chunks.WithChunkSize(chunks.MinChunkSize))
	if err != nil {
		t.Fatal(err)
	}
	all := make([]int, man.NumChunks())
	for i := range all {
		all[i] = i
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h, err := swarm.New(ctx, swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"), swarm.WithDiscovery(false))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Libp2p().Connect(ctx, *ai); err != nil {
		t.Fatal(err)
	}
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }() //nolint:errcheck // EOF ends it
	var got atomic.Int64
	f := chunks.NewFetcher(h.Libp2p(), man)
	fmt.Println("fetching")
	for ctx.Err() == nil {
		f.Fetch(ctx, all, []peer.ID{ai.ID}, func(_ int, data []byte) error { //nolint:errcheck // ends with ctx
			got.Add(int64(len(data)))
			return nil
		})
	}
	fmt.Printf("bytes %d\n", got.Load())
}
