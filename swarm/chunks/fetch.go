package chunks

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/swarm"
)

// FetchOption configures a Fetcher.
type FetchOption func(*Fetcher)

// WithStreams sets how many chunks are requested from one holder at once
// (default 2).
func WithStreams(n int) FetchOption {
	return func(f *Fetcher) {
		if n > 0 {
			f.streams = n
		}
	}
}

// WithStallTimeout drops a holder that takes longer than d to open a
// stream or to deliver one chunk (default 30 s: 4 MiB at 140 KB/s).
func WithStallTimeout(d time.Duration) FetchOption {
	return func(f *Fetcher) {
		if d > 0 {
			f.stall = d
		}
	}
}

// WithOnDrop calls fn, from a fetch goroutine, when a holder is dropped:
// err wraps ErrBadChunk, ErrStalled, ErrProtocol or ErrUnavailable, or is
// a stream error. The swarm can score the peer from it.
func WithOnDrop(fn func(p peer.ID, err error)) FetchOption {
	return func(f *Fetcher) { f.onDrop = fn }
}

// WithProgress calls fn, from a fetch goroutine, after each verified
// chunk with the bytes fetched so far and the total asked for.
func WithProgress(fn func(done, total int64)) FetchOption {
	return func(f *Fetcher) { f.progress = fn }
}

// Fetcher gets the chunks of one manifest from the peers that hold them.
type Fetcher struct {
	h        Network
	m        *Manifest
	streams  int
	stall    time.Duration
	onDrop   func(peer.ID, error)
	progress func(done, total int64)
}

// NewFetcher fetches m's chunks over h.
func NewFetcher(h Network, m *Manifest, opts ...FetchOption) *Fetcher {
	f := &Fetcher{h: h, m: m, streams: 2, stall: 30 * time.Second}
	for _, o := range opts {
		o(f)
	}
	return f
}

// Manifest is the manifest the fetcher checks chunks against.
func (f *Fetcher) Manifest() *Manifest { return f.m }

// Result is what a fetch did.
type Result struct {
	Chunks int   // chunks delivered
	Bytes  int64 // their bytes
	// PerPeer is the verified bytes each holder delivered.
	PerPeer map[peer.ID]int64
	// Dropped is the holders dropped, with why.
	Dropped map[peer.ID]error
}

// Sink takes one verified chunk. It is called from several goroutines at
// once, for distinct chunks; data is only valid during the call. An error
// ends the fetch.
type Sink func(index int, data []byte) error

// run is one fetch's shared state.
type run struct {
	f     *Fetcher
	ctx   context.Context
	sink  Sink
	total int64

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []int
	left    int // chunks not yet delivered
	workers map[peer.ID]int
	dropped map[peer.ID]error
	lacks   map[peer.ID]map[int]bool // chunks a holder said it has not (a slice holder)
	flying  map[int]int              // chunks in flight, by index
	res     Result
	err     error // first sink error
	open    map[*swarm.Stream]struct{}
}

// Fetch gets chunks from holders in parallel and hands each, verified, to
// sink. A holder that sends a bad chunk, stalls, breaks the protocol or
// lacks the model is dropped (and reported) and its chunks go to the
// others. Fetch returns when every chunk is delivered, the context ends,
// sink fails, or no holder is left (ErrNoHolders, joined with why each
// was dropped). All its goroutines have returned by then.
func (f *Fetcher) Fetch(ctx context.Context, chunks []int, holders []peer.ID, sink Sink) (Result, error) {
	chunks = slices.Clone(chunks)
	slices.Sort(chunks)
	chunks = slices.Compact(chunks)
	for _, i := range chunks {
		if i < 0 || i >= f.m.NumChunks() {
			return Result{}, fmt.Errorf("%w: chunk %d of %d", ErrRange, i, f.m.NumChunks())
		}
	}
	r := &run{f: f, ctx: ctx, sink: sink, total: f.m.Bytes(chunks), queue: chunks, left: len(chunks),
		workers: map[peer.ID]int{}, dropped: map[peer.ID]error{}, open: map[*swarm.Stream]struct{}{},
		lacks: map[peer.ID]map[int]bool{}, flying: map[int]int{},
		res: Result{PerPeer: map[peer.ID]int64{}, Dropped: map[peer.ID]error{}}}
	r.cond = sync.NewCond(&r.mu)
	if len(chunks) == 0 {
		return r.res, nil
	}
	// Cancelling wakes the waiting workers and unblocks the reading ones.
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		for st := range r.open {
			st.Reset()
		}
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	// Every worker is counted before any starts: the count says when a
	// holder's last worker has gone.
	var peers []peer.ID
	for _, p := range holders {
		if _, dup := r.workers[p]; !dup && p != f.h.ID() {
			r.workers[p] = f.streams
			peers = append(peers, p)
		}
	}
	var wg sync.WaitGroup
	for _, p := range peers {
		for range f.streams {
			wg.Go(func() { r.work(p) })
		}
	}
	wg.Wait()
	for p, e := range r.dropped {
		r.res.Dropped[p] = e
	}
	switch {
	case r.err != nil:
		return r.res, r.err
	case r.left == 0:
		return r.res, nil
	case ctx.Err() != nil:
		return r.res, ctx.Err()
	}
	errs := []error{fmt.Errorf("%w: %d of %d chunks not fetched", ErrNoHolders, r.left, len(chunks))}
	for p, e := range r.dropped {
		errs = append(errs, fmt.Errorf("%s: %w", p, e))
	}
	return r.res, errors.Join(errs...)
}

// take waits for a chunk to fetch. It returns false when the fetch is over
// for this worker: all delivered, cancelled, failed, or its holder dropped.
func (r *run) take(p peer.ID) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.left == 0 || r.err != nil || r.ctx.Err() != nil || r.dropped[p] != nil {
			return 0, false
		}
		lacks := r.lacks[p]
		for k, i := range r.queue {
			if !lacks[i] {
				r.queue = append(r.queue[:k], r.queue[k+1:]...)
				r.flying[i]++
				return i, true
			}
		}
		// A chunk in flight elsewhere may come back; if p has none of
		// those either, it has nothing more to give.
		wait := false
		for i := range r.flying {
			if !lacks[i] {
				wait = true
				break
			}
		}
		if !wait {
			return 0, false
		}
		r.cond.Wait()
	}
}

// lack puts chunk i back, noting that p does not hold it.
func (r *run) lack(p peer.ID, i int) {
	r.mu.Lock()
	r.land(i)
	r.queue = append(r.queue, i)
	if r.lacks[p] == nil {
		r.lacks[p] = map[int]bool{}
	}
	r.lacks[p][i] = true
	r.cond.Broadcast()
	r.mu.Unlock()
}

// land notes that chunk i is no longer in flight (r.mu held).
func (r *run) land(i int) {
	if r.flying[i]--; r.flying[i] <= 0 {
		delete(r.flying, i)
	}
}

// fail puts chunk i back; with drop, the holder is dropped for err.
func (r *run) fail(p peer.ID, i int, err error, drop bool) {
	r.mu.Lock()
	r.land(i)
	r.queue = append(r.queue, i)
	r.workers[p]--
	first := false
	if (drop || r.workers[p] == 0) && r.dropped[p] == nil && r.ctx.Err() == nil {
		r.dropped[p] = err
		first = true
	}
	r.cond.Broadcast()
	r.mu.Unlock()
	if first && r.f.onDrop != nil {
		r.f.onDrop(p, err)
	}
}

func (r *run) done(p peer.ID, i int, n int64, sinkErr error) {
	r.mu.Lock()
	r.land(i)
	if sinkErr != nil {
		if r.err == nil {
			r.err = sinkErr
		}
	} else {
		r.left--
		r.res.Chunks++
		r.res.Bytes += n
		r.res.PerPeer[p] += n
	}
	done := r.res.Bytes
	r.cond.Broadcast()
	r.mu.Unlock()
	if sinkErr == nil && r.f.progress != nil {
		r.f.progress(done, r.total)
	}
}

func (r *run) track(st *swarm.Stream, on bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		if r.ctx.Err() != nil {
			return false
		}
		r.open[st] = struct{}{}
	} else {
		delete(r.open, st)
	}
	return true
}

// work fetches chunks from p on one stream until the fetch is over.
func (r *run) work(p peer.ID) {
	var st *swarm.Stream
	defer func() {
		if st != nil {
			r.track(st, false)
			st.Close()
		}
	}()
	var buf []byte
	for {
		i, ok := r.take(p)
		if !ok {
			r.mu.Lock()
			r.workers[p]--
			r.mu.Unlock()
			return
		}
		if st == nil {
			var err error
			if st, err = r.openStream(p); err != nil {
				r.fail(p, i, err, true)
				return
			}
		}
		_, n := r.f.m.ChunkRange(i)
		if int64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		data := buf[:n]
		err := r.f.get(st, i, data)
		if err == nil && !r.f.m.Verify(i, data) {
			err = fmt.Errorf("%w: chunk %d", ErrBadChunk, i)
		}
		if errors.Is(err, errLacks) && r.ctx.Err() == nil {
			r.lack(p, i) // a slice holder: the stream goes on with another chunk
			continue
		}
		if err != nil {
			if r.ctx.Err() != nil {
				err = r.ctx.Err()
			}
			// Busy is no fault: this stream retires, the holder's others go on.
			r.fail(p, i, err, !errors.Is(err, errBusy))
			return
		}
		r.done(p, i, n, r.sink(i, data))
	}
}

func (r *run) openStream(p peer.ID) (*swarm.Stream, error) {
	ctx, cancel := context.WithTimeout(r.ctx, r.f.stall)
	defer cancel()
	st, err := r.f.h.Open(ctx, p, Protocol)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded && r.ctx.Err() == nil {
			return nil, fmt.Errorf("%w: opening a stream: %w", ErrStalled, err)
		}
		return nil, fmt.Errorf("%w: opening a stream: %w", ErrUnavailable, err)
	}
	if !r.track(st, true) {
		st.Reset()
		return nil, r.ctx.Err()
	}
	return st, nil
}

// errBusy marks a busy answer (wrapped in ErrUnavailable).
var errBusy = errors.New("busy")

// errLacks marks a "no such chunk" answer (wrapped in ErrUnavailable):
// the holder serves a slice without this chunk.
var errLacks = errors.New("holder lacks the chunk")

// get requests chunk i on st and reads it into data, which has the
// chunk's length: a response of any other length is a protocol error.
func (f *Fetcher) get(st *swarm.Stream, i int, data []byte) error {
	st.SetDeadline(time.Now().Add(f.stall))
	if _, err := st.Write(encodeRequest(f.m.Fingerprint, i)); err != nil {
		return streamErr(err)
	}
	var hdr [5]byte
	if _, err := io.ReadFull(st, hdr[:1]); err != nil {
		return streamErr(err)
	}
	switch hdr[0] {
	case statusOK:
	case statusBusy:
		return fmt.Errorf("%w: %w", ErrUnavailable, errBusy)
	case statusNoChunk:
		return fmt.Errorf("%w: chunk %d: %w", ErrUnavailable, i, errLacks)
	case statusUnknown, statusFailed:
		return fmt.Errorf("%w: chunk %d: %s", ErrUnavailable, i, statusText(hdr[0]))
	default:
		return fmt.Errorf("%w: status %d", ErrProtocol, hdr[0])
	}
	if _, err := io.ReadFull(st, hdr[1:]); err != nil {
		return streamErr(err)
	}
	if n := binary.BigEndian.Uint32(hdr[1:]); int64(n) != int64(len(data)) {
		return fmt.Errorf("%w: chunk %d of %d bytes (want %d)", ErrProtocol, i, n, len(data))
	}
	if _, err := io.ReadFull(st, data); err != nil {
		return streamErr(err)
	}
	return nil
}

func streamErr(err error) error {
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Errorf("%w: %w", ErrStalled, err)
	}
	return err
}
