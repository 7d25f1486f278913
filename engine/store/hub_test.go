package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeHub mimics the Hugging Face hub on loopback: the model API's file
// list, resolve URLs that answer with a 302 to a CDN carrying the LFS
// sha256 and size (X-Linked-Etag, X-Linked-Size), and a CDN that serves
// Range and If-Range with the standard library's ServeContent. Faults are
// switched on per test.
type fakeHub struct {
	t        *testing.T
	hub, cdn *httptest.Server

	mu    sync.Mutex
	files map[string][]byte // "owner/repo/path" -> content
	// wrongHash publishes another sha256 than the content's.
	wrongHash bool
	// token, when set, is required by the hub (not by the CDN).
	token string
	// cutAfter, when > 0, makes the next CDN GET send that many body
	// bytes and then drop the connection (once).
	cutAfter int64
	// noRanges makes the CDN ignore Range (answering 200 with the file).
	noRanges bool
	// rangeCap, when > 0, shortens every range the CDN serves to at most
	// that many bytes, as some servers do.
	rangeCap int64
	// cdnStatus, when set, is the CDN's answer to every GET (an expired
	// signature: 403).
	cdnStatus int
	// expireOnCut makes a cut also expire every URL the hub signed so far
	// (the CDN then answers 403 to them).
	expireOnCut bool
	generation  int

	served     atomic.Int64 // body bytes the CDN sent
	cdnGets    atomic.Int64
	cdnRanged  atomic.Int64 // GETs with a Range header
	cdnAuth    atomic.Int64 // CDN requests that carried Authorization
	hubAuthed  atomic.Int64 // hub requests with the right token
	apiListing atomic.Int64
	resolves   atomic.Int64
}

func newFakeHub(t *testing.T) *fakeHub {
	h := &fakeHub{t: t, files: map[string][]byte{}}
	hub := http.NewServeMux()
	hub.HandleFunc("GET /api/models/{owner}/{repo}", h.serveList)
	hub.HandleFunc("GET /{owner}/{repo}/resolve/{rev}/{file...}", h.serveResolve)
	cdn := http.NewServeMux()
	cdn.HandleFunc("GET /blobs/{sha}", h.serveBlob)
	cdn.HandleFunc("GET /plain/{key...}", h.serveBlob)
	h.hub = httptest.NewServer(hub)
	h.cdn = httptest.NewServer(cdn)
	t.Cleanup(h.hub.Close)
	t.Cleanup(h.cdn.Close)
	return h
}

// put adds a file to a repository and returns its content.
func (h *fakeHub) put(repo, file string, data []byte) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.files[repo+"/"+file] = data
	return data
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func (h *fakeHub) authorized(w http.ResponseWriter, r *http.Request) bool {
	h.mu.Lock()
	tok := h.token
	h.mu.Unlock()
	if tok == "" {
		return true
	}
	if r.Header.Get("Authorization") != "Bearer "+tok {
		http.Error(w, "Invalid credentials in Authorization header", http.StatusUnauthorized)
		return false
	}
	h.hubAuthed.Add(1)
	return true
}

func (h *fakeHub) serveList(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(w, r) {
		return
	}
	h.apiListing.Add(1)
	repo := r.PathValue("owner") + "/" + r.PathValue("repo")
	type sib struct {
		Rfilename string `json:"rfilename"`
	}
	var out struct {
		ID       string `json:"id"`
		Siblings []sib  `json:"siblings"`
	}
	out.ID = repo
	h.mu.Lock()
	for k := range h.files {
		if f, ok := strings.CutPrefix(k, repo+"/"); ok {
			out.Siblings = append(out.Siblings, sib{f})
		}
	}
	h.mu.Unlock()
	if len(out.Siblings) == 0 {
		http.Error(w, "Repository not found", http.StatusNotFound)
		return
	}
	out.Siblings = append(out.Siblings, sib{".gitattributes"}, sib{"README.md"})
	slices.SortFunc(out.Siblings, func(a, b sib) int { return strings.Compare(a.Rfilename, b.Rfilename) })
	json.NewEncoder(w).Encode(out) //nolint:errcheck
}

func (h *fakeHub) serveResolve(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(w, r) {
		return
	}
	key := r.PathValue("owner") + "/" + r.PathValue("repo") + "/" + r.PathValue("file")
	h.resolves.Add(1)
	h.mu.Lock()
	data, ok := h.files[key]
	wrong, gen := h.wrongHash, h.generation
	h.mu.Unlock()
	if !ok || r.PathValue("rev") != "main" {
		http.Error(w, "Entry not found", http.StatusNotFound)
		return
	}
	sum := sha(data)
	published := sum
	if wrong {
		published = sha(append([]byte("other"), data...))
	}
	w.Header().Set("X-Repo-Commit", "0123456789abcdef0123456789abcdef01234567")
	w.Header().Set("X-Linked-Etag", `"`+published+`"`)
	w.Header().Set("ETag", `"`+published+`"`)
	w.Header().Set("X-Linked-Size", strconv.Itoa(len(data)))
	w.Header().Set("Location", h.cdn.URL+"/blobs/"+sum+"?X-Amz-Signature="+strconv.Itoa(gen)+"&name="+r.PathValue("file"))
	w.WriteHeader(http.StatusFound)
}

func (h *fakeHub) serveBlob(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		h.cdnGets.Add(1)
	}
	if r.Header.Get("Authorization") != "" {
		h.cdnAuth.Add(1)
	}
	if r.Header.Get("Range") != "" {
		h.cdnRanged.Add(1)
	}
	want := r.PathValue("sha")
	h.mu.Lock()
	var data []byte
	for k, d := range h.files {
		if sha(d) == want || k == r.PathValue("key") {
			data = d
		}
	}
	var cut int64
	if r.Method == http.MethodGet {
		cut, h.cutAfter = h.cutAfter, 0
	}
	noRanges, rangeCap, status := h.noRanges, h.rangeCap, h.cdnStatus
	if sig := r.URL.Query().Get("X-Amz-Signature"); sig != "" && sig != strconv.Itoa(h.generation) {
		status = http.StatusForbidden
	}
	if cut > 0 && h.expireOnCut {
		h.generation++
	}
	h.mu.Unlock()
	if status != 0 {
		http.Error(w, "Request has expired", status)
		return
	}
	if data == nil {
		http.Error(w, "NoSuchKey", http.StatusNotFound)
		return
	}
	if noRanges {
		r.Header.Del("Range")
	}
	if a, b, ok := strings.Cut(strings.TrimPrefix(r.Header.Get("Range"), "bytes="), "-"); ok && rangeCap > 0 {
		start, _ := strconv.ParseInt(a, 10, 64)
		end, _ := strconv.ParseInt(b, 10, 64)
		r.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", start, min(end, start+rangeCap-1)))
	}
	w.Header().Set("ETag", `"`+sha(data)+`"`)
	cw := &countingWriter{ResponseWriter: w, served: &h.served, budget: cut}
	http.ServeContent(cw, r, "", time.Unix(1700000000, 0), bytes.NewReader(data))
}

// countingWriter counts body bytes and, with a budget, sends that many and
// then aborts the connection, as a network cut half-way would.
type countingWriter struct {
	http.ResponseWriter
	served *atomic.Int64
	budget int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	if c.budget > 0 {
		if int64(len(b)) >= c.budget {
			n, _ := c.ResponseWriter.Write(b[:c.budget])
			c.served.Add(int64(n))
			c.ResponseWriter.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		c.budget -= int64(len(b))
	}
	n, err := c.ResponseWriter.Write(b)
	c.served.Add(int64(n))
	return n, err
}
