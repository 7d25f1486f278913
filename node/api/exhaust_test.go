package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// The API under resource exhaustion (issue 35): many connections that
// send nothing, slowloris clients, and many concurrent streams. Each
// scenario runs against a real node of the shared swarm, checks that
// other clients are still served the right tokens while it lasts, that
// the server lets go of every attacking connection, and that goroutines
// and heap come back down. make test runs them small; STRATA_EXHAUST=1
// (make exhaust) runs them at full size: 10,000 idle connections, 1,000
// slowloris clients and 1,000 concurrent streams.
//
// The attacking connections are opened by a child process (this test
// binary, TestExhaustAttacker), so that its file descriptors do not count
// against the server's.

// exhaustSize is n at full size, small in make test.
func exhaustSize(full, small int) int {
	if os.Getenv("STRATA_EXHAUST") != "" {
		return full
	}
	return small
}

// serverUse is the process's goroutines and heap in use.
type serverUse struct {
	goroutines int
	heap       uint64
}

func measureUse() serverUse {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return serverUse{goroutines: runtime.NumGoroutine(), heap: ms.HeapInuse}
}

// exhaustServer is a second API server on the shared swarm's first node,
// with a short header timeout so that the scenarios end quickly.
func exhaustServer(t *testing.T, hdr time.Duration, opts ...Option) (*Server, string) {
	t.Helper()
	c := shared.get(t)
	s, err := New(NodeBackend(c.nodes[0]), append([]Option{WithLogger(testLog()), WithReadHeaderTimeout(hdr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, addr.String()
}

// The connection attacks' limits: 8,192 connections in all and 256 per
// address.
const exhaustMax, exhaustPerIP = 8192, 256

var exhaustReq = map[string]any{"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}

// attacker is a child process holding n connections to addr.
type attacker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

// attack starts the child, waits until every connection is open, and
// returns it.
func attack(t *testing.T, mode, addr string, n, ips int) *attacker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestExhaustAttacker$", "-test.v")
	cmd.Env = append(os.Environ(), fmt.Sprintf("STRATA_ATTACK=%s %s %d %d", mode, addr, n, ips))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &attacker{cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		defer close(a.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), "attack: "); ok {
				a.lines <- l
			}
		}
	}()
	t.Cleanup(func() { a.stdin.Close(); a.cmd.Wait() })
	if l := a.next(t, 60*time.Second); !strings.HasPrefix(l, "open ") {
		t.Fatalf("attacker: %q", l)
	}
	return a
}

// next is the attacker's next report.
func (a *attacker) next(t *testing.T, within time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-a.lines:
		if !ok {
			t.Fatal("attacker exited")
		}
		return l
	case <-time.After(within):
		t.Fatalf("attacker said nothing in %v", within)
	}
	return ""
}

// TestExhaustAttacker is the child process: it opens n connections to
// addr, from ips loopback addresses (127.0.0.2 on) in turn, and, for "slow", sends a request's headers a byte at a time, one
// byte per 100 ms on each. It reports "open n" once all are open, then
// "closed n slowest" once the server has closed every one of them.
func TestExhaustAttacker(t *testing.T) {
	spec := os.Getenv("STRATA_ATTACK")
	if spec == "" {
		t.Skip("the child process of TestExhaustion")
	}
	var mode, addr string
	var n, ips int
	if _, err := fmt.Sscanf(spec, "%s %s %d %d", &mode, &addr, &n, &ips); err != nil {
		t.Fatal(err)
	}
	conns := make([]net.Conn, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				d := net.Dialer{Timeout: 30 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%ips))}}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					fmt.Printf("attack: dial %d: %v\n", i, err)
					os.Exit(1)
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	open := time.Now()
	fmt.Printf("attack: open %d\n", n)
	var closed sync.WaitGroup
	var slowest atomic.Int64
	for _, c := range conns {
		closed.Add(1)
		go func() {
			defer closed.Done()
			if mode == "slow" {
				go func() {
					for _, b := range []byte("POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 1000)) {
						if _, err := c.Write([]byte{b}); err != nil {
							return
						}
						time.Sleep(100 * time.Millisecond)
					}
				}()
			}
			// The server closes the connection: the read ends (an
			// answer such as 408 may come first).
			io.Copy(io.Discard, c)
			d := int64(time.Since(open))
			for {
				s := slowest.Load()
				if d <= s || slowest.CompareAndSwap(s, d) {
					break
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { closed.Wait(); close(done) }()
	go func() { io.Copy(io.Discard, os.Stdin); os.Exit(0) }()
	<-done
	fmt.Printf("attack: closed %d %d\n", n, slowest.Load())
	io.Copy(io.Discard, os.Stdin)
}

// servedDuring sends requests one after another until stop closes and
// returns their latencies; each must answer want.
func servedDuring(t *testing.T, url, want string, stop <-chan struct{}) []time.Duration {
	t.Helper()
	var lat []time.Duration
	for {
		start := time.Now()
		if got := textOf(completion(t, url+"/v1/completions", exhaustReq)); got != want {
			t.Errorf("served %q during the attack, want %q", got, want)
		}
		lat = append(lat, time.Since(start))
		select {
		case <-stop:
			return lat
		default:
		}
	}
}

func maxDur(ds []time.Duration) time.Duration { return slices.Max(ds) }

// connectionAttack runs one attacker of mode, n connections from ips
// addresses, against a fresh server, with other clients served meanwhile,
// and reports what it cost the server.
func connectionAttack(t *testing.T, mode string, n, ips int) {
	const hdr = 2 * time.Second
	s, addr := exhaustServer(t, hdr, WithConnectionLimits(exhaustMax, exhaustPerIP))
	url := "http://" + addr
	want := textOf(completion(t, url+"/v1/completions", exhaustReq))
	// The most the server may hold at once.
	limit := 0
	for ip := range ips {
		limit += min(exhaustPerIP, n/ips+btoi(ip < n%ips))
	}
	limit = min(limit, exhaustMax)
	before := measureUse()
	a := attack(t, mode, addr, n, ips)
	// Every connection is open or refused: the server holds each one it
	// accepted until its header timeout.
	peak := measureUse()
	stop := make(chan struct{})
	lat := make(chan []time.Duration, 1)
	go func() { lat <- servedDuring(t, url, want, stop) }()
	l := a.next(t, hdr+60*time.Second)
	close(stop)
	served := <-lat
	var closed int
	var slowest time.Duration
	if _, err := fmt.Sscanf(l, "closed %d %d", &closed, &slowest); err != nil || closed != n {
		t.Fatalf("attacker: %q", l)
	}
	var m dto.Metric
	if err := s.m.connsRefused.Write(&m); err != nil {
		t.Fatal(err)
	}
	refused := int(m.GetCounter().GetValue())
	// Goroutines come back down once the server has let go of them.
	var after serverUse
	deadline := time.Now().Add(10 * time.Second)
	for after = measureUse(); after.goroutines > before.goroutines+16 && time.Now().Before(deadline); after = measureUse() {
		time.Sleep(50 * time.Millisecond)
	}
	held := peak.goroutines - before.goroutines
	t.Logf("%d %s connections from %d addresses (limits %d, %d per address: at most %d held): %d refused at accept; "+
		"every one closed by the server %v after the last opened (header timeout %v); "+
		"heap %d → %d MiB with them → %d MiB after; goroutines %d → %d → %d; %d requests served meanwhile, slowest %v",
		n, mode, ips, exhaustMax, exhaustPerIP, limit, refused, slowest.Round(time.Millisecond), hdr,
		before.heap>>20, peak.heap>>20, after.heap>>20, before.goroutines, peak.goroutines, after.goroutines,
		len(served), maxDur(served).Round(time.Millisecond))
	if after.goroutines > before.goroutines+16 {
		t.Errorf("goroutines %d after the attack, %d before", after.goroutines, before.goroutines)
	}
	// Bounds: the server holds no more connections than its limits allow
	// (one goroutine each), and a held connection costs its goroutine and
	// read buffer, about 10 KiB; 64 KiB would mean the server buffers for
	// it.
	if held > limit+16 {
		t.Errorf("the server held %d connections at once, limit %d", held, limit)
	}
	if grew := int64(peak.heap) - int64(before.heap); grew > int64(limit)*64<<10 {
		t.Errorf("heap grew %d MiB with %d connections held", grew>>20, limit)
	}
	if n > limit && refused == 0 {
		t.Errorf("%d connections, limit %d, none refused", n, limit)
	}
	// The header timeout is per connection from its accept; the last was
	// accepted when the attacker reported them all open.
	if slowest > hdr+10*time.Second {
		t.Errorf("the server held a connection %v after the last opened; header timeout %v", slowest, hdr)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestExhaustIdleConnections: connections that never send a byte. In
// make test, 500 from one address, over its limit; at full size 10,000
// from 40 addresses, over the server's.
func TestExhaustIdleConnections(t *testing.T) {
	connectionAttack(t, "idle", exhaustSize(10_000, 500), exhaustSize(40, 1))
}

// TestExhaustSlowloris: connections that send their headers a byte at a
// time and never finish them.
func TestExhaustSlowloris(t *testing.T) {
	connectionAttack(t, "slow", exhaustSize(1_000, 200), exhaustSize(4, 1))
}

// TestExhaustConcurrentStreams: many streams at once. Each ends with the
// single-request tokens and [DONE], or with a clear refusal (429 or 503
// with an error object); none hangs, and the server is idle afterwards.
// They come from one address, under the default per-address limit.
func TestExhaustConcurrentStreams(t *testing.T) {
	n := exhaustSize(1_000, 64)
	_, addr := exhaustServer(t, 10*time.Second)
	url := "http://" + addr + "/v1/completions"
	want := textOf(completion(t, url, exhaustReq))
	before := measureUse()
	tr := &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: n}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	req := map[string]any{"stream": true}
	for k, v := range exhaustReq {
		req[k] = v
	}
	body, _ := json.Marshal(req)
	type outcome struct {
		status int
		text   string
		done   bool
		errMsg string
		took   time.Duration
	}
	out := make([]outcome, n)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := &out[i]
			defer func() { o.took = time.Since(start) }()
			r, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
			r.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(r)
			if err != nil {
				o.errMsg = err.Error()
				return
			}
			defer resp.Body.Close()
			o.status = resp.StatusCode
			if resp.StatusCode != http.StatusOK {
				raw, _ := io.ReadAll(resp.Body)
				var e struct {
					Error *errorObject `json:"error"`
				}
				if json.Unmarshal(raw, &e) != nil || e.Error == nil || e.Error.Message == "" {
					o.errMsg = "no error object: " + string(raw)
				}
				return
			}
			s := &sseStream{resp: resp, sc: bufio.NewScanner(resp.Body), cancel: func() {}}
			for {
				ev, ok := s.next()
				if !ok {
					break
				}
				if ev.data == "[DONE]" {
					o.done = true
					continue
				}
				var ch struct {
					Choices []struct {
						Text string `json:"text"`
					} `json:"choices"`
					Error *errorObject `json:"error"`
				}
				if err := json.Unmarshal([]byte(ev.data), &ch); err != nil {
					o.errMsg = err.Error()
					return
				}
				if ch.Error != nil {
					o.errMsg = "error event: " + ch.Error.Message
				}
				for _, c := range ch.Choices {
					o.text += c.Text
				}
			}
		}()
	}
	wg.Wait()
	counts := map[string]int{}
	var slowest time.Duration
	for i, o := range out {
		slowest = max(slowest, o.took)
		switch {
		case o.status == http.StatusOK && o.done && o.text == want && o.errMsg == "":
			counts["completed"]++
		case (o.status == http.StatusTooManyRequests || o.status == http.StatusServiceUnavailable) && o.errMsg == "":
			counts["refused "+strconv.Itoa(o.status)]++
		default:
			t.Errorf("stream %d: status %d, done %v, text %q (want %q), %s", i, o.status, o.done, o.text, want, o.errMsg)
		}
	}
	// Served normally afterwards, and nothing left running.
	if got := textOf(completion(t, url, exhaustReq)); got != want {
		t.Errorf("after the streams: %q, want %q", got, want)
	}
	tr.CloseIdleConnections()
	var after serverUse
	deadline := time.Now().Add(10 * time.Second)
	for after = measureUse(); after.goroutines > before.goroutines+16 && time.Now().Before(deadline); after = measureUse() {
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d concurrent streams: %v, all ended within %v; goroutines %d → %d, heap %d → %d MiB",
		n, counts, slowest.Round(time.Millisecond), before.goroutines, after.goroutines, before.heap>>20, after.heap>>20)
	if counts["completed"] == 0 {
		t.Error("no stream completed")
	}
	if after.goroutines > before.goroutines+16 {
		t.Errorf("goroutines %d after the streams, %d before", after.goroutines, before.goroutines)
	}
}
