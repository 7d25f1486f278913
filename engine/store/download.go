package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// download writes one file to its .partial in one or several ranges and
// records in .state how far each range got, so that a later run resumes.
type download struct {
	p         *Puller
	name      string
	url       string
	size      int64 // -1: unknown (no ranges, no resume)
	partial   string
	state     string
	resumable bool // the file's hash is known: resuming cannot mix versions unnoticed
	// refresh, when set, asks for a fresh URL of the same file once the
	// current one is refused (an expired signature).
	refresh func(context.Context) (string, error)

	mu        sync.Mutex // guards st, unsaved, url
	urlMu     sync.Mutex // serialises renewals (held over a request; mu is not)
	refreshes int
	st        dlState
	f         *os.File
	unsaved   int64
	restarted bool // after a restart: one stream, no ranges
}

// dlState is the .state file.
type dlState struct {
	URL  string `json:"url"`
	Size int64  `json:"size"`
	// Validator is the server's strong ETag or Last-Modified, sent as
	// If-Range so that a changed file is not resumed.
	Validator string    `json:"validator,omitempty"`
	Segments  []segment `json:"segments"`
}

// segment is the byte range [Start, End) of which [Start, Done) is written.
type segment struct {
	Start int64 `json:"start"`
	End   int64 `json:"end"`
	Done  int64 `json:"done"`
}

// checkpointBytes is how much a download writes between saves of its
// state (each save syncs the partial file first).
const checkpointBytes = 64 << 20

// errRefused marks a 401/403 from a server other than the hub: a signed
// URL that expired, which refresh may renew.
var errRefused = errors.New("download URL refused")

// maxRefreshes bounds how often one download asks for a fresh URL.
const maxRefreshes = 8

// renew replaces a refused URL with a fresh one; false when it cannot.
func (d *download) renew(ctx context.Context, refused string) bool {
	if d.refresh == nil {
		return false
	}
	d.urlMu.Lock()
	defer d.urlMu.Unlock()
	d.mu.Lock()
	current := d.url
	d.mu.Unlock()
	if current != refused {
		return true // another segment renewed it already
	}
	if d.refreshes >= maxRefreshes {
		return false
	}
	d.refreshes++
	u, err := d.refresh(ctx)
	if err != nil {
		return false
	}
	d.mu.Lock()
	d.url = u
	d.mu.Unlock()
	return true
}

// errRestart says the server's file is not the one being resumed (or the
// server ignores ranges): start over from byte 0.
var errRestart = errors.New("store: restart download")

func (d *download) run(ctx context.Context) error {
	if d.size < 0 {
		return d.stream(ctx)
	}
	for {
		err := d.attempt(ctx)
		if errors.Is(err, errRestart) && !d.restarted {
			d.restarted = true
			os.Remove(d.state)
			os.Remove(d.partial)
			continue
		}
		if errors.Is(err, errRestart) {
			return fmt.Errorf("%w: %s: the server's file changed during the download or it ignores ranges", ErrDownload, d.name)
		}
		return err
	}
}

// open loads a consistent state and partial file, or starts both afresh.
func (d *download) open() (resumed bool, err error) {
	if b, err := os.ReadFile(d.state); err == nil && json.Unmarshal(b, &d.st) == nil && d.st.Size == d.size && d.validState() {
		if st, err := os.Stat(d.partial); err == nil && st.Size() == d.size && (d.resumable || d.st.Validator != "") {
			if d.f, err = os.OpenFile(d.partial, os.O_RDWR, 0o644); err == nil {
				return true, nil
			}
		}
	}
	os.Remove(d.state)
	if d.f, err = os.OpenFile(d.partial, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644); err != nil {
		return false, fmt.Errorf("store: %w", err)
	}
	if err := d.f.Truncate(d.size); err != nil {
		d.f.Close()
		return false, fmt.Errorf("store: %w", err)
	}
	n := 1
	if d.size >= d.p.parallelMin && !d.restarted {
		n = d.p.parts
	}
	n = int(min(int64(n), max(d.size/(1<<20), 1))) // no range under 1 MiB
	d.st = dlState{URL: d.url, Size: d.size}
	for i := range n {
		a, b := d.size*int64(i)/int64(n), d.size*int64(i+1)/int64(n)
		d.st.Segments = append(d.st.Segments, segment{Start: a, End: b, Done: a})
	}
	return false, nil
}

// validState checks a loaded state covers [0, size) with ranges in order.
func (d *download) validState() bool {
	var at int64
	for _, s := range d.st.Segments {
		if s.Start != at || s.Done < s.Start || s.Done > s.End || s.End > d.size {
			return false
		}
		at = s.End
	}
	return at == d.size && len(d.st.Segments) > 0
}

func (d *download) doneBytes() int64 {
	var n int64
	for _, s := range d.st.Segments {
		n += s.Done - s.Start
	}
	return n
}

// attempt runs every unfinished segment in parallel, each on its own
// ranged connection; the first one's answer tells whether the server
// honours ranges at all.
func (d *download) attempt(ctx context.Context) (err error) {
	resumed, err := d.open()
	if err != nil {
		return err
	}
	defer func() {
		if serr := d.save(); err == nil {
			err = serr
		}
		if cerr := d.f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("store: %w", cerr)
		}
	}()
	d.p.progress.Start(d.name, d.size, d.doneBytes())
	defer func() {
		if !errors.Is(err, errRestart) {
			d.p.progress.Finish(err)
		}
	}()
	var todo []int
	for i, s := range d.st.Segments {
		if s.Done < s.End {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	first := todo[0]
	resp, err := d.get(ctx, d.st.Segments[first], resumed)
	if err != nil {
		return err
	}
	if resp.StatusCode == http.StatusOK {
		fresh := !resumed && len(d.st.Segments) == 1
		if !fresh {
			// Ranges ignored, or If-Range found a changed file: the body is
			// the whole (current) file; start again with one stream.
			resp.Body.Close()
			return errRestart
		}
	}
	if d.st.Validator == "" {
		d.st.Validator = validator(resp)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(todo))
	var wg sync.WaitGroup
	for k, i := range todo {
		var r *http.Response
		if k == 0 {
			r = resp
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := d.segment(ctx, i, r, resumed)
			if err != nil {
				cancel()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	// The first real failure, not the cancellations it caused.
	var firstErr error
	for e := range errs {
		if e != nil && (firstErr == nil || errors.Is(firstErr, context.Canceled)) {
			firstErr = e
		}
	}
	return firstErr
}

// validator is the response's strong ETag, else its Last-Modified.
func validator(resp *http.Response) string {
	if et := resp.Header.Get("ETag"); et != "" && !strings.HasPrefix(et, "W/") {
		return et
	}
	return resp.Header.Get("Last-Modified")
}

// get asks for the rest of a segment; with If-Range once a validator is
// known, so that a changed file answers 200 instead of a wrong range.
func (d *download) get(ctx context.Context, s segment, resumed bool) (*http.Response, error) {
	hdr := http.Header{}
	hdr.Set("Range", fmt.Sprintf("bytes=%d-%d", s.Done, s.End-1))
	if d.st.Validator != "" && (resumed || s.Done > s.Start) {
		hdr.Set("If-Range", d.st.Validator)
	}
	d.mu.Lock()
	u := d.url
	d.mu.Unlock()
	resp, err := d.p.do(ctx, http.MethodGet, u, hdr)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return resp, nil
	case http.StatusPartialContent:
		start, end, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || start != s.Done || end > s.End-1 || total != d.size {
			resp.Body.Close()
			return nil, fmt.Errorf("%w: %s: asked bytes %d-%d of %d, the server sent %q", ErrDownload, d.name, s.Done, s.End-1, d.size, resp.Header.Get("Content-Range"))
		}
		return resp, nil
	case http.StatusRequestedRangeNotSatisfiable:
		resp.Body.Close()
		return nil, errRestart
	}
	defer resp.Body.Close()
	return nil, d.p.statusErr(resp, d.name)
}

// parseContentRange reads "bytes START-END/TOTAL".
func parseContentRange(v string) (start, end, total int64, ok bool) {
	rest, found := strings.CutPrefix(v, "bytes ")
	if !found {
		return 0, 0, 0, false
	}
	rng, tot, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, 0, false
	}
	a, b, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, 0, false
	}
	var err1, err2, err3 error
	start, err1 = strconv.ParseInt(a, 10, 64)
	end, err2 = strconv.ParseInt(b, 10, 64)
	total, err3 = strconv.ParseInt(tot, 10, 64)
	return start, end, total, err1 == nil && err2 == nil && err3 == nil && start <= end
}

// segment downloads segment i to its end, resuming a broken connection
// up to the puller's retries. resp is the segment's first answer, if
// already asked.
func (d *download) segment(ctx context.Context, i int, resp *http.Response, resumed bool) error {
	buf := make([]byte, 1<<20)
	for try := 0; ; try++ {
		if resp == nil {
			d.mu.Lock()
			s := d.st.Segments[i]
			d.mu.Unlock()
			var err error
			d.mu.Lock()
			u := d.url
			d.mu.Unlock()
			resp, err = d.get(ctx, s, resumed || try > 0)
			if err == nil && resp.StatusCode == http.StatusOK {
				resp.Body.Close()
				return errRestart
			}
			if errors.Is(err, errRefused) && d.renew(ctx, u) {
				try--
				continue
			}
			if err != nil {
				if !retryable(ctx, err) || try >= d.p.retries {
					return err
				}
				if err := d.wait(ctx, try); err != nil {
					return err
				}
				continue
			}
		}
		n, err := d.copy(i, resp.Body, buf)
		whole := err == nil && n > 0 && n == resp.ContentLength
		resp.Body.Close()
		resp = nil
		d.mu.Lock()
		s := d.st.Segments[i]
		d.mu.Unlock()
		if err == nil && s.Done == s.End {
			return nil
		}
		if whole {
			// The server sent all it said it would but less than asked
			// (some cap a range's length): ask for the rest, no failure.
			try--
			continue
		}
		if err == nil {
			err = fmt.Errorf("%w: %s: connection closed at byte %d of range %d-%d", ErrDownload, d.name, s.Done, s.Start, s.End-1)
		}
		if !retryable(ctx, err) || try >= d.p.retries {
			return err
		}
		if err := d.wait(ctx, try); err != nil {
			return err
		}
	}
}

func retryable(ctx context.Context, err error) bool {
	return ctx.Err() == nil && !errors.Is(err, ErrUnauthorized) && !errors.Is(err, ErrNotFound) && !errors.Is(err, errRestart) &&
		!errors.Is(err, errWrite)
}

func (d *download) wait(ctx context.Context, try int) error {
	t := time.NewTimer(d.p.retryDelay * time.Duration(try+1))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// errWrite marks a local write failure: retrying the network will not help.
var errWrite = errors.New("store: write failed")

// copy writes body at the segment's Done offset until the segment ends or
// the body does, advancing Done and checkpointing the state; it returns
// the bytes written.
func (d *download) copy(i int, body io.Reader, buf []byte) (int64, error) {
	var total int64
	for {
		d.mu.Lock()
		s := d.st.Segments[i]
		d.mu.Unlock()
		if s.Done == s.End {
			return total, nil
		}
		want := min(int64(len(buf)), s.End-s.Done)
		n, rerr := io.ReadFull(body, buf[:want])
		if n > 0 {
			if _, err := d.f.WriteAt(buf[:n], s.Done); err != nil {
				return total, fmt.Errorf("%w: %s: %v", errWrite, d.partial, err)
			}
			total += int64(n)
			d.mu.Lock()
			d.st.Segments[i].Done += int64(n)
			d.unsaved += int64(n)
			save := d.unsaved >= checkpointBytes
			d.mu.Unlock()
			d.p.progress.Add(int64(n))
			if save {
				if err := d.save(); err != nil {
					return total, err
				}
			}
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
				return total, nil // short body: the caller sees Done < End
			}
			return total, fmt.Errorf("%w: %s: %v", ErrDownload, d.name, rerr)
		}
	}
}

// save syncs the partial file, then writes the state: the state never
// claims bytes that are not on disk.
func (d *download) save() error {
	if err := d.f.Sync(); err != nil {
		return fmt.Errorf("%w: %s: %v", errWrite, d.partial, err)
	}
	d.mu.Lock()
	b, err := json.Marshal(d.st)
	d.unsaved = 0
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return writeFileAtomic(d.state, b)
}

// stream downloads a file of unknown size in one piece, with no resume.
func (d *download) stream(ctx context.Context) (err error) {
	os.Remove(d.state)
	f, err := os.OpenFile(d.partial, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer f.Close()
	resp, err := d.p.do(ctx, http.MethodGet, d.url, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return d.p.statusErr(resp, d.name)
	}
	d.p.progress.Start(d.name, resp.ContentLength, 0)
	defer func() { d.p.progress.Finish(err) }()
	n, err := io.Copy(f, io.TeeReader(resp.Body, progressWriter{d.p.progress}))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrDownload, d.name, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return fmt.Errorf("%w: %s: got %d of %d bytes", ErrDownload, d.name, n, resp.ContentLength)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("%w: %s: %v", errWrite, d.partial, err)
	}
	return nil
}

type progressWriter struct{ p Progress }

func (w progressWriter) Write(b []byte) (int, error) {
	w.p.Add(int64(len(b)))
	return len(b), nil
}
