package testnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// sseServer answers /v1/completions: with each of fail's statuses in
// turn (503 with Retry-After and the node's no_capacity body), then with
// a stream of the given pieces, optionally cut by an error chunk after
// the first piece.
func sseServer(t *testing.T, fail []int, retryAfter string, pieces []string, errAfterFirst bool) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(calls.Add(1)) - 1
		if n < len(fail) {
			if retryAfter != "" {
				w.Header().Set("Retry-After", retryAfter)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(fail[n])
			fmt.Fprint(w, `{"error":{"message":"no full path through the swarm","type":"server_error","param":null,"code":"no_capacity"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i, p := range pieces {
			fmt.Fprintf(w, "data: {\"choices\":[{\"text\":%q}]}\n\n", p)
			w.(http.Flusher).Flush()
			if i == 0 && errAfterFirst {
				fmt.Fprint(w, "data: {\"error\":{\"message\":\"session lost\",\"code\":\"session_lost\"}}\n\n")
				return
			}
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// testLoad is a load whose entry nodes are the given URLs, in turn.
func testLoad(rp retryPolicy, urls ...string) *load {
	var procs []*proc
	for i, u := range urls {
		procs = append(procs, &proc{spec: NodeSpec{Name: fmt.Sprintf("n%d", i+1)}, apiURL: u})
	}
	var (
		mu   sync.Mutex
		next int
	)
	return &load{
		spec:    LoadSpec{MaxTokens: 4, Timeout: 10 * time.Second, Endpoint: "completions"},
		model:   "m",
		prompts: []string{"Hello there"},
		hc:      &http.Client{},
		retry:   rp,
		pick: func(avoid *proc) *proc {
			mu.Lock()
			defer mu.Unlock()
			for k := range procs {
				p := procs[(next+k)%len(procs)]
				if p != avoid {
					next = (next + k + 1) % len(procs)
					return p
				}
			}
			return nil
		},
	}
}

// A 503 with Retry-After before any output is retried after the wait it
// names, and the request counts as ok with one retry.
func TestLoadRetries503(t *testing.T) {
	srv, calls := sseServer(t, []int{http.StatusServiceUnavailable}, "1", []string{"a", "b"}, false)
	l := testLoad(clientRetry, srv.URL)
	t0 := time.Now()
	r := l.do(context.Background(), t0, 0, 0, false)
	if !r.OK || r.Text != "ab" || r.Tokens != 2 {
		t.Fatalf("want ok with %q: %+v", "ab", r)
	}
	if r.Retries != 1 || len(r.RetryErrs) != 1 || r.RetryErrs[0] != "HTTP 503 no_capacity" || r.Retried {
		t.Errorf("retries %d %v, entry retried %v; want 1 retry after HTTP 503 no_capacity", r.Retries, r.RetryErrs, r.Retried)
	}
	if calls.Load() != 2 {
		t.Errorf("%d calls, want 2", calls.Load())
	}
	// Retry-After: 1 was honored, and TTFT counts from the first attempt.
	if d := time.Since(t0); d < time.Second || r.TTFT < time.Second {
		t.Errorf("retried after %v (TTFT %v), want at least Retry-After's 1 s", d, r.TTFT)
	}
}

// A 503 that does not go away fails after the policy's retries, and
// Retry-After is capped.
func TestLoadRetriesAreBounded(t *testing.T) {
	srv, calls := sseServer(t, []int{503, 503, 503, 503, 503, 503}, "30", []string{"a"}, false)
	rp := retryPolicy{Max: 3, Budget: 10 * time.Second, Cap: 20 * time.Millisecond, Base: 5 * time.Millisecond}
	start := time.Now()
	r := testLoad(rp, srv.URL).do(context.Background(), start, 0, 0, false)
	if r.OK || r.Retries != 3 || calls.Load() != 4 || !strings.HasPrefix(r.Err, "HTTP 503") {
		t.Errorf("want a failure after 3 retries (4 calls): ok %v, retries %d, calls %d, err %q", r.OK, r.Retries, calls.Load(), r.Err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v: Retry-After 30 s was not capped", d)
	}

	// The time budget stops retries too: no retry would start after it.
	srv2, calls2 := sseServer(t, []int{503, 503, 503, 503}, "", []string{"a"}, false)
	rp = retryPolicy{Max: 10, Budget: 150 * time.Millisecond, Cap: 100 * time.Millisecond, Base: 100 * time.Millisecond}
	r = testLoad(rp, srv2.URL).do(context.Background(), time.Now(), 0, 0, false)
	if r.OK || r.Retries != 1 || calls2.Load() != 2 {
		t.Errorf("budget: ok %v, retries %d, calls %d; want 1 retry within 150 ms", r.OK, r.Retries, calls2.Load())
	}
}

// An error once output has begun is final, and other statuses are not
// retried.
func TestLoadNoRetryAfterOutput(t *testing.T) {
	srv, calls := sseServer(t, nil, "", []string{"a", "b"}, true)
	r := testLoad(clientRetry, srv.URL).do(context.Background(), time.Now(), 0, 0, false)
	if r.OK || r.Retries != 0 || calls.Load() != 1 || !strings.Contains(r.Err, "session lost") {
		t.Errorf("an error after output: ok %v, retries %d, calls %d, err %q; want one failed call", r.OK, r.Retries, calls.Load(), r.Err)
	}
	srv2, calls2 := sseServer(t, []int{http.StatusInternalServerError}, "1", []string{"a"}, false)
	r = testLoad(clientRetry, srv2.URL).do(context.Background(), time.Now(), 0, 0, false)
	if r.OK || r.Retries != 0 || calls2.Load() != 1 {
		t.Errorf("a 500: ok %v, retries %d, calls %d; want one failed call", r.OK, r.Retries, calls2.Load())
	}
}

// A refused connection (an entry node that died without the runner's
// doing) is retried on the next entry node.
func TestLoadRetriesRefusedConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	srv, _ := sseServer(t, nil, "", []string{"x"}, false)
	rp := retryPolicy{Max: 4, Budget: 5 * time.Second, Cap: 50 * time.Millisecond, Base: 10 * time.Millisecond}
	r := testLoad(rp, dead, srv.URL).do(context.Background(), time.Now(), 0, 0, false)
	if !r.OK || r.Retries != 1 || r.Entry != "n2" || len(r.RetryErrs) != 1 || r.RetryErrs[0] != "connection refused" {
		t.Errorf("want ok on n2 after one retry for a refused connection: %+v", r)
	}
}

func TestRetryPolicyWait(t *testing.T) {
	rp := retryPolicy{Max: 4, Budget: 15 * time.Second, Cap: 2 * time.Second, Base: 500 * time.Millisecond}
	s := time.Second
	refused := fmt.Errorf("dial: %w", syscall.ECONNREFUSED)
	for _, c := range []struct {
		name    string
		err     error
		n       int
		elapsed time.Duration
		want    time.Duration
		ok      bool
	}{
		{"503 Retry-After 1", &httpError{Status: 503, RetryAfter: s}, 0, 0, s, true},
		{"429 Retry-After capped", &httpError{Status: 429, RetryAfter: 9 * s}, 0, 0, 2 * s, true},
		{"503 without Retry-After backs off", &httpError{Status: 503}, 2, 0, 2 * s, true},
		{"refused, first", refused, 0, 0, 500 * time.Millisecond, true},
		{"after Max", &httpError{Status: 503, RetryAfter: s}, 4, 0, 0, false},
		{"past the budget", &httpError{Status: 503, RetryAfter: s}, 1, 14500 * time.Millisecond, 0, false},
		{"500", &httpError{Status: 500}, 0, 0, 0, false},
		{"a stream error", errors.New("stream error: session lost"), 0, 0, 0, false},
	} {
		got, ok := rp.wait(c.err, c.n, c.elapsed)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: wait %v %v, want %v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
