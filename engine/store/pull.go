package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultEndpoint is the Hugging Face hub, used unless HF_ENDPOINT or
// WithEndpoint names another (a mirror).
const DefaultEndpoint = "https://huggingface.co"

// Puller downloads models into a Store.
type Puller struct {
	store       *Store
	endpoint    *url.URL
	token       string
	client      *http.Client
	parts       int
	parallelMin int64
	retries     int
	retryDelay  time.Duration
	progress    Progress
	revision    string
	err         error
}

// Option configures a Puller.
type Option func(*Puller)

// WithEndpoint sets the hub's base URL (default: $HF_ENDPOINT, else
// DefaultEndpoint).
func WithEndpoint(u string) Option {
	return func(p *Puller) {
		e, err := url.Parse(strings.TrimRight(u, "/"))
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
			p.err = fmt.Errorf("%w: hub endpoint %q: want http(s)://host", ErrBadRef, u)
			return
		}
		p.endpoint = e
	}
}

// WithToken sets the hub token sent as "Authorization: Bearer" to the
// endpoint's host only (default: $HF_TOKEN). "" sends none.
func WithToken(t string) Option { return func(p *Puller) { p.token = t } }

// WithHTTPClient sets the HTTP client (its transport and timeouts; the
// puller follows redirects itself so that the token never leaves the hub).
func WithHTTPClient(c *http.Client) Option { return func(p *Puller) { p.client = c } }

// WithParts sets how many ranged connections download one big file at
// once (default 4; 1: one stream).
func WithParts(n int) Option { return func(p *Puller) { p.parts = max(n, 1) } }

// WithParallelMin sets the size from which a file is downloaded in
// parallel ranges (default 64 MiB).
func WithParallelMin(n int64) Option { return func(p *Puller) { p.parallelMin = n } }

// WithRetries sets how many times a broken connection is resumed within
// one pull before it fails (default 5; a later pull resumes anyway).
func WithRetries(n int) Option { return func(p *Puller) { p.retries = max(n, 0) } }

// WithRetryDelay sets the first wait before a retry; it grows linearly
// (default 1 s).
func WithRetryDelay(d time.Duration) Option { return func(p *Puller) { p.retryDelay = d } }

// WithProgress sets where progress goes (default Discard).
func WithProgress(pr Progress) Option { return func(p *Puller) { p.progress = pr } }

// WithRevision sets the hub revision (branch, tag or commit; default main).
func WithRevision(rev string) Option { return func(p *Puller) { p.revision = rev } }

// NewPuller returns a puller into s. HF_ENDPOINT and HF_TOKEN give the
// defaults of WithEndpoint and WithToken.
func NewPuller(s *Store, opts ...Option) (*Puller, error) {
	p := &Puller{store: s, client: http.DefaultClient, parts: 4, parallelMin: 64 << 20, retries: 5,
		retryDelay: time.Second, progress: Discard, revision: "main", token: os.Getenv("HF_TOKEN")}
	ep := DefaultEndpoint
	if e := os.Getenv("HF_ENDPOINT"); e != "" {
		ep = e
	}
	WithEndpoint(ep)(p)
	for _, o := range opts {
		o(p)
	}
	if p.err != nil {
		return nil, p.err
	}
	if p.revision == "" || strings.ContainsAny(p.revision, "?#") || strings.Contains(p.revision, "..") {
		return nil, fmt.Errorf("%w: bad revision %q", ErrBadRef, p.revision)
	}
	// Our own redirect handling: the hub's 302 carries the file's hash and
	// size, which an automatic follow would drop.
	c := *p.client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	p.client = &c
	return p, nil
}

// Pull downloads the model that ref names (see ParseRef) unless the store
// holds it already with the hashes the hub publishes now, and records it
// under ref's canonical name.
func (p *Puller) Pull(ctx context.Context, ref string) (Entry, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return Entry{}, err
	}
	return p.PullRef(ctx, r)
}

// PullRef is Pull for a parsed reference.
func (p *Puller) PullRef(ctx context.Context, r Ref) (Entry, error) {
	var files []fileSpec
	var source string
	switch r.Kind {
	case KindURL:
		u, err := url.Parse(r.URL)
		if err != nil {
			return Entry{}, fmt.Errorf("%w: %v", ErrBadRef, err)
		}
		files = []fileSpec{{name: path.Base(u.Path), url: r.URL}}
		source = r.Name()
	case KindHub:
		names, err := p.hubFiles(ctx, r)
		if err != nil {
			return Entry{}, err
		}
		for _, n := range names {
			files = append(files, fileSpec{name: n, url: p.resolveURL(r.Repo, n), hub: true})
		}
		source = "hf://" + r.Repo + "@" + p.revision
	default:
		return Entry{}, fmt.Errorf("%w: empty reference", ErrBadRef)
	}
	e := Entry{Name: r.Name(), Source: source, Verified: true}
	var locks []*fileLock
	defer func() {
		for _, l := range locks {
			l.unlock()
		}
	}()
	for i, f := range files {
		if len(files) > 1 {
			p.progress.Note(fmt.Sprintf("part %d of %d: %s", i+1, len(files), f.name))
		}
		got, ls, err := p.fetch(ctx, f)
		locks = append(locks, ls...)
		if err != nil {
			return Entry{}, err
		}
		e.Verified = e.Verified && got.verified
		e.Parts = append(e.Parts, got.part)
		if i == 0 && f.hub && got.commit != "" {
			e.Source = "hf://" + r.Repo + "@" + got.commit
		}
	}
	e.Pulled = time.Now().UTC().Truncate(time.Second)
	if err := p.store.add(ctx, e); err != nil {
		return Entry{}, err
	}
	return e, nil
}

// fileSpec is one file to fetch.
type fileSpec struct {
	name string // the file's path in the repository (or the URL's base name)
	url  string
	hub  bool
}

// fetched is a file made a blob: verified says its hash was checked
// against a published one; commit is the hub's revision, if it said.
type fetched struct {
	part     Part
	verified bool
	commit   string
}

func (p *Puller) resolveURL(repo, file string) string {
	elems := strings.Split(file, "/")
	for i, e := range elems {
		elems[i] = url.PathEscape(e)
	}
	return p.endpoint.String() + "/" + repo + "/resolve/" + url.PathEscape(p.revision) + "/" + strings.Join(elems, "/")
}

// hubFiles is the ordered list of files ref names in its repository.
func (p *Puller) hubFiles(ctx context.Context, r Ref) ([]string, error) {
	if r.File != "" {
		parts, err := splitParts(r.File)
		if err != nil {
			return nil, err
		}
		if parts == nil {
			return []string{r.File}, nil
		}
		return parts, nil
	}
	u := p.endpoint.String() + "/api/models/" + r.Repo
	if p.revision != "main" {
		u += "/revision/" + url.PathEscape(p.revision)
	}
	resp, err := p.do(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, p.statusErr(resp, "repository "+r.Repo)
	}
	var info struct {
		Siblings []struct {
			Rfilename string `json:"rfilename"`
		} `json:"siblings"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&info); err != nil {
		return nil, fmt.Errorf("%w: hub file list of %s: %v", ErrDownload, r.Repo, err)
	}
	names := make([]string, 0, len(info.Siblings))
	for _, s := range info.Siblings {
		if checkFile(s.Rfilename) == nil {
			names = append(names, s.Rfilename)
		}
	}
	return pickFiles(r, names)
}

// pickFiles chooses a model among a repository's files: the GGUF files
// whose names carry the quant, grouped so that a split model's parts count
// as one. Exactly one model must remain.
func pickFiles(r Ref, names []string) ([]string, error) {
	groups := map[string][]string{}
	var order []string
	for _, n := range names {
		if !strings.HasSuffix(strings.ToLower(n), ".gguf") {
			continue
		}
		key := n
		if m := splitRe.FindStringSubmatch(n); m != nil {
			key = m[1] + "-*-of-" + m[3] + ".gguf"
		}
		if r.Quant != "" && !matchQuant(n, r.Quant) {
			continue
		}
		if groups[key] == nil {
			order = append(order, key)
		}
		groups[key] = append(groups[key], n)
	}
	// A vision projector (mmproj-*.gguf) shares the quant label of the model
	// it goes with; prefer the model.
	if models := slices.DeleteFunc(slices.Clone(order), isProjector); len(models) > 0 {
		order = models
	}
	slices.Sort(order)
	want := "GGUF file"
	if r.Quant != "" {
		want = "GGUF file with quant " + strconv.Quote(r.Quant)
	}
	switch len(order) {
	case 0:
		var all []string
		for _, n := range names {
			if strings.HasSuffix(strings.ToLower(n), ".gguf") {
				all = append(all, n)
			}
		}
		return nil, fmt.Errorf("%w: %s has no %s (GGUF files: %s)", ErrNoMatch, r.Repo, want, listOrNone(all))
	case 1:
	default:
		return nil, fmt.Errorf("%w: %s has several models matching (%s): name the file (hf://%s/FILE.gguf) or a quant (%s:QUANT)",
			ErrAmbiguous, r.Repo, strings.Join(order, ", "), r.Repo, r.Repo)
	}
	files := groups[order[0]]
	parts, err := splitParts(files[0])
	if err != nil || parts == nil {
		return files, err
	}
	for _, pt := range parts {
		if !slices.Contains(files, pt) {
			return nil, fmt.Errorf("%w: %s lists split model %s without its part %s", ErrNotFound, r.Repo, order[0], pt)
		}
	}
	return parts, nil
}

func isProjector(key string) bool {
	return strings.HasPrefix(strings.ToLower(path.Base(key)), "mmproj")
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	if len(s) > 12 {
		return strings.Join(s[:12], ", ") + fmt.Sprintf(" and %d more", len(s)-12)
	}
	return strings.Join(s, ", ")
}

// matchQuant reports whether file's name carries quant as a whole label:
// q4_k matches model-Q4_K.gguf and Q4_K/model-00001-of-00002.gguf but not
// model-Q4_K_M.gguf.
func matchQuant(file, quant string) bool {
	name := strings.ToLower(file)
	name = strings.TrimSuffix(name, ".gguf")
	if m := splitRe.FindStringSubmatch(strings.ToLower(file)); m != nil {
		name = m[1]
	}
	q := strings.ToLower(quant)
	for i := 0; ; {
		j := strings.Index(name[i:], q)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(q)
		before := j == 0 || strings.IndexByte("-._/", name[j-1]) >= 0
		after := end == len(name) || strings.IndexByte("-./", name[end]) >= 0
		if before && after {
			return true
		}
		i = j + 1
	}
}

// meta is what the hub (or a plain server) says about a file before the
// download: where to get it, its sha256 and size when published.
type meta struct {
	url    string
	sha256 string
	size   int64
	commit string
}

// probe asks for a file's metadata with HEAD, following redirects until one
// carries the hub's X-Linked-Etag (the LFS sha256; its Location is the CDN
// URL) or the file itself answers.
func (p *Puller) probe(ctx context.Context, f fileSpec) (meta, error) {
	u := f.url
	for hop := 0; hop < 10; hop++ {
		req, err := p.newRequest(ctx, http.MethodHead, u)
		if err != nil {
			return meta{}, err
		}
		resp, err := p.client.Do(req)
		if err != nil {
			return meta{}, fmt.Errorf("%w: %s: %v", ErrDownload, f.name, err)
		}
		resp.Body.Close()
		m := meta{url: u, size: -1, commit: resp.Header.Get("X-Repo-Commit")}
		if sz := resp.Header.Get("X-Linked-Size"); sz != "" {
			if n, err := strconv.ParseInt(sz, 10, 64); err == nil && n >= 0 {
				m.size = n
			}
		}
		if h := etagHash(resp.Header.Get("X-Linked-Etag")); h != "" {
			m.sha256 = h
		} else if f.hub {
			// A hub answer without X-Linked-Etag is a file stored in LFS
			// only when its ETag is a sha256 (git blobs have sha1 ETags).
			m.sha256 = etagHash(resp.Header.Get("ETag"))
		}
		switch {
		case resp.StatusCode >= 300 && resp.StatusCode < 400:
			loc, err := resp.Location()
			if err != nil {
				return meta{}, fmt.Errorf("%w: %s: redirect without Location", ErrDownload, f.name)
			}
			if m.sha256 != "" || resp.Header.Get("X-Linked-Size") != "" {
				// The hub's answer: the CDN URL is signed for GET only,
				// so it is not probed further.
				m.url = loc.String()
				return m, nil
			}
			u = loc.String()
			continue
		case resp.StatusCode == http.StatusOK:
			if m.size < 0 {
				m.size = resp.ContentLength
			}
			return m, nil
		case resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotImplemented:
			return m, nil // no HEAD: learn the size from the GET
		default:
			return meta{}, p.statusErr(resp, f.name)
		}
	}
	return meta{}, fmt.Errorf("%w: %s: too many redirects", ErrDownload, f.name)
}

// etagHash returns the sha256 an ETag carries ("HEX", W/"HEX"), or "".
func etagHash(tag string) string {
	tag = strings.TrimPrefix(strings.TrimSpace(tag), "W/")
	tag = strings.ToLower(strings.Trim(tag, `"`))
	if hexRe.MatchString(tag) {
		return tag
	}
	return ""
}

// newRequest builds a request, with the token only for the hub's own host:
// a CDN or any other server never sees it.
func (p *Puller) newRequest(ctx context.Context, method, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRef, err)
	}
	if p.token != "" && req.URL.Scheme == p.endpoint.Scheme && req.URL.Host == p.endpoint.Host {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	req.Header.Set("User-Agent", "strata-model-pull/1")
	return req, nil
}

// do sends a request and follows redirects (each hop gets its own
// Authorization decision); hdr is copied onto every hop.
func (p *Puller) do(ctx context.Context, method, u string, hdr http.Header) (*http.Response, error) {
	for hop := 0; hop < 10; hop++ {
		req, err := p.newRequest(ctx, method, u)
		if err != nil {
			return nil, err
		}
		for k, v := range hdr {
			req.Header[k] = v
		}
		resp, err := p.client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("%w: %s: %v", ErrDownload, u, err)
		}
		if resp.StatusCode < 300 || resp.StatusCode >= 400 || resp.StatusCode == http.StatusNotModified {
			return resp, nil
		}
		loc, err := resp.Location()
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("%w: %s: redirect without Location", ErrDownload, u)
		}
		u = loc.String()
	}
	return nil, fmt.Errorf("%w: %s: too many redirects", ErrDownload, u)
}

// statusErr turns a failed status into a sentinel error; what names the
// file or repository.
func (p *Puller) statusErr(resp *http.Response, what string) error {
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		if resp.Request.URL.Host != p.endpoint.Host {
			// Not the hub: a signed CDN URL that expired, or a plain
			// server's refusal. A new pull asks the hub for a fresh URL
			// and resumes.
			return fmt.Errorf("%w: %w: %s: %s from %s: the download URL was refused (a signed URL may have expired); pull again to resume",
				ErrUnauthorized, errRefused, what, resp.Status, resp.Request.URL.Host)
		}
		hint := "set HF_TOKEN to a Hugging Face token that can read it (and accept the model's license on its page if it is gated)"
		if p.token != "" {
			hint = "the HF_TOKEN sent was refused: check that it is valid and that its account has accepted the model's license"
		}
		return fmt.Errorf("%w: %s: %s from %s: %s", ErrUnauthorized, what, resp.Status, resp.Request.URL.Host, hint)
	case http.StatusNotFound:
		return fmt.Errorf("%w: %s: %s from %s", ErrNotFound, what, resp.Status, resp.Request.URL.Host)
	}
	return fmt.Errorf("%w: %s: %s from %s", ErrDownload, what, resp.Status, resp.Request.URL.Host)
}

// fetch makes one file a blob of the store and returns it with the locks
// the caller holds until the file is named in the index.
func (p *Puller) fetch(ctx context.Context, f fileSpec) (fetched, []*fileLock, error) {
	m, err := p.probe(ctx, f)
	if err != nil {
		return fetched{}, nil, err
	}
	key := "sha256-" + m.sha256
	if m.sha256 == "" {
		// Keyed by the URL without its query, which may be a signature
		// that changes from one run to the next.
		h := sha256.Sum256([]byte(Ref{Kind: KindURL, URL: f.url}.Name()))
		key = "url-" + hex.EncodeToString(h[:16])
	}
	base := p.store.root + string(os.PathSeparator) + blobsDir + string(os.PathSeparator) + key
	l, err := lockFile(ctx, base+".lock")
	if err != nil {
		return fetched{}, nil, err
	}
	locks := []*fileLock{l}
	if m.sha256 != "" {
		if st, err := os.Stat(p.store.blobPath(m.sha256)); err == nil && (m.size < 0 || st.Size() == m.size) {
			p.progress.Note(fmt.Sprintf("%s: already in the store (sha256 %s)", f.name, m.sha256[:12]))
			return fetched{Part{File: f.name, SHA256: m.sha256, Size: st.Size()}, true, m.commit}, locks, nil
		}
	}
	if err := p.checkSpace(f.name, base, m.size); err != nil {
		return fetched{}, locks, err
	}
	d := &download{p: p, name: f.name, url: m.url, size: m.size, partial: base + ".partial", state: base + ".state",
		resumable: m.sha256 != ""}
	if m.url != f.url {
		// A redirect's target (a signed CDN URL) may expire during a long
		// download: ask the hub again for the same file.
		d.refresh = func(ctx context.Context) (string, error) {
			m2, err := p.probe(ctx, f)
			if err != nil {
				return "", err
			}
			if m2.sha256 != m.sha256 || m2.size != m.size {
				return "", fmt.Errorf("%w: %s changed on the server during the download", ErrDownload, f.name)
			}
			return m2.url, nil
		}
	}
	if err := d.run(ctx); err != nil {
		return fetched{}, locks, err
	}
	p.progress.Note(fmt.Sprintf("%s: verifying sha256", f.name))
	sum, size, err := hashFile(ctx, d.partial)
	if err != nil {
		return fetched{}, locks, err
	}
	if m.sha256 != "" && sum != m.sha256 {
		os.Remove(d.partial)
		os.Remove(d.state)
		return fetched{}, locks, fmt.Errorf("%w: %s: got %s, the server published %s; the partial file is removed, pull again",
			ErrHashMismatch, f.name, sum, m.sha256)
	}
	if m.sha256 == "" {
		// Named by its content now: lock that name too against a Remove.
		bl, err := lockFile(ctx, p.store.blobPath(sum)+".lock")
		if err != nil {
			return fetched{}, locks, err
		}
		locks = append(locks, bl)
	}
	if err := os.Rename(d.partial, p.store.blobPath(sum)); err != nil {
		return fetched{}, locks, fmt.Errorf("store: %w", err)
	}
	os.Remove(d.state)
	return fetched{Part{File: f.name, SHA256: sum, Size: size}, m.sha256 != "", m.commit}, locks, nil
}

// checkSpace refuses a download the disk cannot hold; the bytes a
// partial file from an earlier run holds count as written.
func (p *Puller) checkSpace(name, base string, size int64) error {
	if size <= 0 {
		return nil
	}
	free, ok := freeSpace(p.store.root)
	if !ok {
		return nil
	}
	var have int64
	if b, err := os.ReadFile(base + ".state"); err == nil {
		var ds dlState
		if json.Unmarshal(b, &ds) == nil && ds.Size == size {
			for _, s := range ds.Segments {
				have += max(s.Done-s.Start, 0)
			}
		}
	}
	if need := size - have; need > free {
		return fmt.Errorf("%w: %s needs %s more, %s has %s free", ErrNoSpace, name, HumanBytes(need), p.store.root, HumanBytes(free))
	}
	return nil
}

// hashFile is the sha256 and size of a file, read with ctx checked between
// chunks (a big model takes a while).
func hashFile(ctx context.Context, name string) (string, int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", 0, fmt.Errorf("store: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	buf := make([]byte, 4<<20)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return "", 0, err
		}
		k, err := f.Read(buf)
		h.Write(buf[:k])
		n += int64(k)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", 0, fmt.Errorf("store: %w", err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
