package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func testStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "models"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testPuller pulls from h with no token from the environment.
func testPuller(t *testing.T, s *Store, h *fakeHub, opts ...Option) *Puller {
	t.Helper()
	base := []Option{WithEndpoint(h.hub.URL), WithToken(""), WithRetryDelay(time.Millisecond)}
	p, err := NewPuller(s, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func readModel(t *testing.T, s *Store, e Entry) []byte {
	t.Helper()
	path, err := s.Path(e)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// leftovers lists the partial and state files under the store's blobs.
func leftovers(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	for _, pat := range []string{"*.partial", "*.state"} {
		m, err := filepath.Glob(filepath.Join(s.Dir(), blobsDir, pat))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	return out
}

func TestPullByQuant(t *testing.T) {
	h := newFakeHub(t)
	want := h.put("Qwen/Tiny-GGUF", "tiny-Q4_K_M.gguf", randomBytes(1, 300_000))
	h.put("Qwen/Tiny-GGUF", "tiny-Q4_K_S.gguf", randomBytes(2, 1000))
	h.put("Qwen/Tiny-GGUF", "tiny-Q8_0.gguf", randomBytes(3, 1000))
	h.put("Qwen/Tiny-GGUF", "mmproj-tiny-Q4_K_M.gguf", randomBytes(4, 1000))
	h.token = "hf_secret"
	s := testStore(t)
	p := testPuller(t, s, h, WithToken("hf_secret"))
	e, err := p.Pull(context.Background(), "Qwen/Tiny-GGUF:Q4_K_M")
	if err != nil {
		t.Fatal(err)
	}
	if e.Name != "Qwen/Tiny-GGUF:q4_k_m" || len(e.Parts) != 1 || e.Parts[0].File != "tiny-Q4_K_M.gguf" || !e.Verified {
		t.Fatalf("entry %+v", e)
	}
	if e.Parts[0].SHA256 != sha(want) || e.Parts[0].Size != int64(len(want)) {
		t.Fatalf("part %+v, want sha %s size %d", e.Parts[0], sha(want), len(want))
	}
	if !strings.Contains(e.Source, "0123456789abcdef") {
		t.Errorf("source %q lacks the hub's commit", e.Source)
	}
	if got := readModel(t, s, e); !bytes.Equal(got, want) {
		t.Fatal("stored file differs from the hub's")
	}
	if h.cdnAuth.Load() != 0 {
		t.Errorf("the token went to the CDN %d times", h.cdnAuth.Load())
	}
	if h.hubAuthed.Load() == 0 {
		t.Error("the hub never saw the token")
	}
	list, err := s.List()
	if err != nil || len(list) != 1 || list[0].Name != e.Name {
		t.Fatalf("list %+v, %v", list, err)
	}
	if l := leftovers(t, s); len(l) != 0 {
		t.Errorf("leftovers %v", l)
	}
	// Pulled again: nothing is downloaded.
	gets := h.cdnGets.Load()
	if _, err := p.Pull(context.Background(), "Qwen/Tiny-GGUF:q4_k_m"); err != nil {
		t.Fatal(err)
	}
	if h.cdnGets.Load() != gets {
		t.Errorf("a second pull downloaded again")
	}
}

func TestPullParallelRanges(t *testing.T) {
	h := newFakeHub(t)
	want := h.put("o/r", "m-f16.gguf", randomBytes(5, 5<<20+123))
	s := testStore(t)
	p := testPuller(t, s, h, WithParts(3), WithParallelMin(1<<20))
	e, err := p.Pull(context.Background(), "hf://o/r/m-f16.gguf")
	if err != nil {
		t.Fatal(err)
	}
	if got := readModel(t, s, e); !bytes.Equal(got, want) {
		t.Fatal("stored file differs from the hub's")
	}
	if h.cdnRanged.Load() != 3 || h.cdnGets.Load() != 3 {
		t.Errorf("CDN saw %d GETs, %d ranged; want 3 ranged", h.cdnGets.Load(), h.cdnRanged.Load())
	}
	if h.served.Load() != int64(len(want)) {
		t.Errorf("CDN sent %d bytes for a %d-byte file", h.served.Load(), len(want))
	}
}

// A connection cut half-way fails a pull that may not retry, leaves a
// partial file that is no model, and the next pull resumes it.
func TestPullResumeAfterCut(t *testing.T) {
	for _, parts := range []int{1, 4} {
		t.Run("parts="+string(rune('0'+parts)), func(t *testing.T) {
			h := newFakeHub(t)
			size := 4<<20 + 77
			want := h.put("o/r", "m-q8_0.gguf", randomBytes(6, size))
			h.cutAfter = int64(size / 2 / parts)
			s := testStore(t)
			p := testPuller(t, s, h, WithRetries(0), WithParts(parts), WithParallelMin(1<<20))
			_, err := p.Pull(context.Background(), "o/r:q8_0")
			if !errors.Is(err, ErrDownload) {
				t.Fatalf("cut pull: %v, want ErrDownload", err)
			}
			if l, _ := s.List(); len(l) != 0 {
				t.Fatalf("a partial download is listed: %+v", l)
			}
			if _, err := Resolve(context.Background(), "o/r:q8_0", s.Dir()); !errors.Is(err, ErrNotFound) {
				t.Fatalf("resolve of a partial model: %v, want ErrNotFound", err)
			}
			if l := leftovers(t, s); len(l) != 2 {
				t.Fatalf("partial and state files: %v", l)
			}
			first := h.served.Load()
			if first == 0 || first >= int64(size) {
				t.Fatalf("first pull got %d of %d bytes", first, size)
			}
			e, err := p.Pull(context.Background(), "o/r:q8_0")
			if err != nil {
				t.Fatal(err)
			}
			again := h.served.Load() - first
			if again >= int64(size) || first+again < int64(size) {
				t.Errorf("resume fetched %d bytes after %d of %d", again, first, size)
			}
			if got := readModel(t, s, e); !bytes.Equal(got, want) {
				t.Fatal("resumed file differs from the hub's")
			}
			if l := leftovers(t, s); len(l) != 0 {
				t.Errorf("leftovers %v", l)
			}
		})
	}
}

// With retries a cut is resumed within the same pull.
func TestPullRetriesCut(t *testing.T) {
	h := newFakeHub(t)
	size := 2<<20 + 5
	want := h.put("o/r", "m-q8_0.gguf", randomBytes(7, size))
	h.cutAfter = int64(size / 3)
	s := testStore(t)
	p := testPuller(t, s, h, WithRetries(2), WithParts(1))
	e, err := p.Pull(context.Background(), "hf://o/r")
	if err != nil {
		t.Fatal(err)
	}
	if got := readModel(t, s, e); !bytes.Equal(got, want) {
		t.Fatal("file differs")
	}
	if h.cdnGets.Load() != 2 || h.served.Load() != int64(size) {
		t.Errorf("%d GETs, %d bytes sent for %d: want 2 GETs and no byte twice", h.cdnGets.Load(), h.served.Load(), size)
	}
}

func TestPullHashMismatch(t *testing.T) {
	h := newFakeHub(t)
	h.put("o/r", "m-q4_0.gguf", randomBytes(8, 100_000))
	h.wrongHash = true
	s := testStore(t)
	p := testPuller(t, s, h)
	_, err := p.Pull(context.Background(), "o/r:q4_0")
	if !errors.Is(err, ErrHashMismatch) {
		t.Fatalf("pull: %v, want ErrHashMismatch", err)
	}
	if !strings.Contains(err.Error(), "m-q4_0.gguf") || !strings.Contains(err.Error(), "removed") {
		t.Errorf("error %q does not name the file and say the partial is removed", err)
	}
	if l := leftovers(t, s); len(l) != 0 {
		t.Errorf("the partial file stayed: %v", l)
	}
	blobs, _ := filepath.Glob(filepath.Join(s.Dir(), blobsDir, "sha256-*"))
	for _, b := range blobs {
		if !strings.HasSuffix(b, ".lock") {
			t.Errorf("a blob was kept: %s", b)
		}
	}
	if l, _ := s.List(); len(l) != 0 {
		t.Errorf("listed: %+v", l)
	}
}

func TestPullUnauthorized(t *testing.T) {
	h := newFakeHub(t)
	h.put("meta/Gated-GGUF", "g-q4_k_m.gguf", randomBytes(9, 1000))
	h.token = "hf_right"
	s := testStore(t)
	for _, tok := range []string{"", "hf_wrong"} {
		p := testPuller(t, s, h, WithToken(tok))
		for _, ref := range []string{"meta/Gated-GGUF:q4_k_m", "hf://meta/Gated-GGUF/g-q4_k_m.gguf"} {
			_, err := p.Pull(context.Background(), ref)
			if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "HF_TOKEN") || !strings.Contains(err.Error(), "401") {
				t.Errorf("token %q, %s: %v; want ErrUnauthorized naming HF_TOKEN and the status", tok, ref, err)
			}
		}
	}
	// A CDN that refuses (an expired signature) is not the token's fault.
	h.cdnStatus = 403
	p := testPuller(t, s, h, WithToken("hf_right"))
	_, err := p.Pull(context.Background(), "meta/Gated-GGUF:q4_k_m")
	if !errors.Is(err, ErrUnauthorized) || strings.Contains(err.Error(), "HF_TOKEN") || !strings.Contains(err.Error(), "pull again") {
		t.Errorf("CDN 403: %v", err)
	}
	h.cdnStatus = 0
	// HF_TOKEN from the environment is the default.
	t.Setenv("HF_TOKEN", "hf_right")
	p, err = NewPuller(s, WithEndpoint(h.hub.URL))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Pull(context.Background(), "meta/Gated-GGUF:q4_k_m"); err != nil {
		t.Fatal(err)
	}
}

func TestPullEndpointFromEnv(t *testing.T) {
	h := newFakeHub(t)
	want := h.put("o/r", "x.gguf", randomBytes(10, 5000))
	t.Setenv("HF_ENDPOINT", h.hub.URL)
	t.Setenv("HF_TOKEN", "")
	s := testStore(t)
	p, err := NewPuller(s)
	if err != nil {
		t.Fatal(err)
	}
	e, err := p.Pull(context.Background(), "hf://o/r/x.gguf")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readModel(t, s, e), want) {
		t.Fatal("file differs")
	}
}

func TestPullSplitModel(t *testing.T) {
	h := newFakeHub(t)
	var want [][]byte
	for i, n := range []string{"00001", "00002", "00003"} {
		want = append(want, h.put("o/Big-GGUF", "Q4_K_M/big-Q4_K_M-"+n+"-of-00003.gguf", randomBytes(uint64(20+i), 70_000+i)))
	}
	h.put("o/Big-GGUF", "Q8_0/big-Q8_0-00001-of-00002.gguf", randomBytes(30, 10))
	h.put("o/Big-GGUF", "Q8_0/big-Q8_0-00002-of-00002.gguf", randomBytes(31, 10))
	s := testStore(t)
	p := testPuller(t, s, h)
	e, err := p.Pull(context.Background(), "o/Big-GGUF:q4_k_m")
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Parts) != 3 {
		t.Fatalf("parts %+v", e.Parts)
	}
	first, err := s.Path(e)
	if err != nil {
		t.Fatal(err)
	}
	for i, pt := range e.Parts {
		if !strings.HasSuffix(pt.File, []string{"00001", "00002", "00003"}[i]+"-of-00003.gguf") {
			t.Errorf("part %d is %s", i, pt.File)
		}
		// Every part sits beside the first under its own name.
		got, err := os.ReadFile(filepath.Join(filepath.Dir(first), filepath.Base(pt.File)))
		if err != nil || !bytes.Equal(got, want[i]) {
			t.Errorf("part %d: %v, equal %v", i, err, bytes.Equal(got, want[i]))
		}
	}
	// Naming any part pulls the whole model; the blobs are already held.
	gets := h.cdnGets.Load()
	e2, err := p.Pull(context.Background(), "hf://o/Big-GGUF/Q4_K_M/big-Q4_K_M-00002-of-00003.gguf")
	if err != nil {
		t.Fatal(err)
	}
	if len(e2.Parts) != 3 || e2.Parts[0].SHA256 != e.Parts[0].SHA256 || h.cdnGets.Load() != gets {
		t.Errorf("second spelling: %+v, %d new GETs", e2.Parts, h.cdnGets.Load()-gets)
	}
	// A split model with a missing part is refused.
	h.put("o/Broken-GGUF", "b-q4_0-00001-of-00002.gguf", randomBytes(40, 10))
	if _, err := p.Pull(context.Background(), "o/Broken-GGUF:q4_0"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing part: %v, want ErrNotFound", err)
	}
}

func TestPullChoiceErrors(t *testing.T) {
	h := newFakeHub(t)
	h.put("o/r", "a-q4_0.gguf", randomBytes(11, 10))
	h.put("o/r", "a-q8_0.gguf", randomBytes(12, 10))
	s := testStore(t)
	p := testPuller(t, s, h)
	ctx := context.Background()
	if _, err := p.Pull(ctx, "hf://o/r"); !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), "a-q8_0.gguf") {
		t.Errorf("two models, no quant: %v", err)
	}
	if _, err := p.Pull(ctx, "o/r:q5_k_m"); !errors.Is(err, ErrNoMatch) || !strings.Contains(err.Error(), "a-q4_0.gguf") {
		t.Errorf("no such quant: %v", err)
	}
	if _, err := p.Pull(ctx, "o/nothing:q4_0"); !errors.Is(err, ErrNotFound) {
		t.Errorf("no such repo: %v", err)
	}
	if _, err := p.Pull(ctx, "hf://o/r/missing.gguf"); !errors.Is(err, ErrNotFound) {
		t.Errorf("no such file: %v", err)
	}
	if _, err := p.Pull(ctx, "o/r"); !errors.Is(err, ErrBadRef) {
		t.Errorf("bad ref: %v", err)
	}
	if l := leftovers(t, s); len(l) != 0 {
		t.Errorf("leftovers %v", l)
	}
}

// Two pulls of the same file at once: one downloads, the other waits on
// the file lock and finds the blob.
func TestConcurrentPulls(t *testing.T) {
	h := newFakeHub(t)
	want := h.put("o/r", "m-q4_0.gguf", randomBytes(13, 3<<20))
	dir := testStore(t).Dir()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(dir) // separate handles, as two processes would have
			if err != nil {
				errs[i] = err
				return
			}
			p := testPuller(t, s, h, WithParts(2), WithParallelMin(1<<20))
			_, errs[i] = p.Pull(context.Background(), "o/r:q4_0")
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if h.served.Load() != int64(len(want)) {
		t.Errorf("CDN sent %d bytes for one %d-byte file", h.served.Load(), len(want))
	}
	s, _ := Open(dir)
	e, err := s.Lookup("o/r:q4_0")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readModel(t, s, e), want) {
		t.Fatal("file differs")
	}
}

// A plain URL whose file changes between a cut and the resume: If-Range
// makes the server send the new file whole, and the store holds that one.
func TestPullURLIfRange(t *testing.T) {
	h := newFakeHub(t)
	h.put("o/r", "m.gguf", randomBytes(14, 1<<20))
	h.cutAfter = 300_000
	s := testStore(t)
	p := testPuller(t, s, h, WithRetries(0), WithParts(1))
	url := h.cdn.URL + "/plain/o/r/m.gguf"
	if _, err := p.Pull(context.Background(), url); !errors.Is(err, ErrDownload) {
		t.Fatalf("cut: %v", err)
	}
	newer := h.put("o/r", "m.gguf", randomBytes(15, 1<<20))
	e, err := p.Pull(context.Background(), url+"?download=1")
	if err != nil {
		t.Fatal(err)
	}
	if e.Name != url || e.Verified {
		t.Errorf("entry %q verified %v", e.Name, e.Verified)
	}
	if !bytes.Equal(readModel(t, s, e), newer) {
		t.Fatal("the store mixed the old and the new file")
	}
}

// A server that ignores Range still gives a whole file (one stream).
func TestPullNoRanges(t *testing.T) {
	h := newFakeHub(t)
	want := h.put("o/r", "m-q4_0.gguf", randomBytes(16, 3<<20))
	h.noRanges = true
	s := testStore(t)
	p := testPuller(t, s, h, WithParts(4), WithParallelMin(1<<20))
	e, err := p.Pull(context.Background(), "o/r:q4_0")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readModel(t, s, e), want) {
		t.Fatal("file differs")
	}
}

// A server that sends shorter ranges than asked is followed up, not
// counted as a failure.
func TestPullCappedRanges(t *testing.T) {
	h := newFakeHub(t)
	want := h.put("o/r", "m-q4_0.gguf", randomBytes(17, 3<<20+9))
	h.rangeCap = 1 << 19
	s := testStore(t)
	p := testPuller(t, s, h, WithRetries(0), WithParts(2), WithParallelMin(1<<20))
	e, err := p.Pull(context.Background(), "o/r:q4_0")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readModel(t, s, e), want) {
		t.Fatal("file differs")
	}
	if g := h.cdnGets.Load(); g < 7 || h.served.Load() != int64(len(want)) {
		t.Errorf("%d GETs, %d bytes sent for %d", g, h.served.Load(), len(want))
	}
}

// A signed CDN URL that expires during the download is renewed from the
// hub and the download resumes within the same pull.
func TestPullRenewsExpiredURL(t *testing.T) {
	h := newFakeHub(t)
	size := 2<<20 + 3
	want := h.put("o/r", "m-q8_0.gguf", randomBytes(18, size))
	h.cutAfter = int64(size / 2)
	h.expireOnCut = true
	s := testStore(t)
	p := testPuller(t, s, h, WithRetries(1), WithParts(1))
	e, err := p.Pull(context.Background(), "o/r:q8_0")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readModel(t, s, e), want) {
		t.Fatal("file differs")
	}
	// The cut GET, one refused with the old signature, one resumed.
	if h.resolves.Load() != 2 || h.cdnGets.Load() != 3 || h.served.Load() != int64(size) {
		t.Errorf("%d resolves, %d GETs, %d bytes sent for %d", h.resolves.Load(), h.cdnGets.Load(), h.served.Load(), size)
	}
}
