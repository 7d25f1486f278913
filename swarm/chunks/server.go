package chunks

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/stratanet/strata/internal/peerlimit"
	"github.com/stratanet/strata/swarm"
)

// ServerOption configures a Server.
type ServerOption func(*Server)

// WithStreamsPerPeer bounds the chunk streams one peer may have open at
// once (default 4); a stream above the bound is answered "busy".
func WithStreamsPerPeer(n int) ServerOption {
	return func(s *Server) {
		if n > 0 {
			s.perPeerMax = n
		}
	}
}

// WithIdleTimeout closes a stream that sends no request for d, and bounds
// the time to write one chunk (default 60 s).
func WithIdleTimeout(d time.Duration) ServerOption {
	return func(s *Server) {
		if d > 0 {
			s.idle = d
		}
	}
}

// WithUploadRate limits what the server sends, to all peers together, to
// bytesPerSec (default: no limit), so that uploads leave the host's link
// and CPU to the inference it serves. SetUploadRate changes it later.
func WithUploadRate(bytesPerSec int64) ServerOption {
	return func(s *Server) { s.SetUploadRate(bytesPerSec) }
}

// WithPeerRequestRate paces the requests each peer may have answered to
// perSec a second, bursts of burst (default: no pacing): a request past
// its peer's rate waits for its turn, so a peer that floods queues behind
// its own bucket while others are answered at once, and an honest
// fetcher is slowed, never refused (a "busy" answer would drop the
// holder). Unknown and out-of-range requests count too.
func WithPeerRequestRate(perSec float64, burst int) ServerOption {
	return func(s *Server) {
		if perSec > 0 {
			s.peerRate = peerlimit.New(perSec, burst, maxPacedPeers)
		}
	}
}

// maxPacedPeers bounds the peers paced separately (peerlimit.Limiter).
const maxPacedPeers = 4096

// uploadPiece is the unit the rate limiter meters: small enough that the
// limit holds over a fraction of a second, large enough to cost nothing.
const uploadPiece = 64 << 10

type served struct {
	m  *Manifest
	r  io.ReaderAt
	c  io.Closer
	sl *SliceReader // non-nil: only the chunks of a slice, rebuilt and checked
}

// Server serves the chunks of the files it holds on Protocol. Memory for
// each chunk in flight is reserved from the stream's resource scope, so
// the host's resource manager bounds what chunk uploads may hold, per
// peer and in all.
type Server struct {
	h          Network
	perPeerMax int
	idle       time.Duration
	limiter    *rate.Limiter
	peerRate   *peerlimit.Limiter // nil: requests are not paced per peer
	ctx        context.Context    // ends at Close, to end waits on the limiter
	cancel     context.CancelFunc
	sent       atomic.Int64 // chunk bytes written, over the server's life

	pauseMu sync.Mutex
	resume  chan struct{} // non-nil while paused; closed on resuming

	mu      sync.Mutex
	files   map[string]served
	perPeer map[peer.ID]int
	streams map[*swarm.Stream]struct{}
	closed  bool
	wg      sync.WaitGroup
	bufs    sync.Pool
}

// NewServer registers the chunk protocol on h. Close removes it.
func NewServer(h Network, opts ...ServerOption) *Server {
	s := &Server{h: h, perPeerMax: 4, idle: 60 * time.Second, files: map[string]served{},
		perPeer: map[peer.ID]int{}, streams: map[*swarm.Stream]struct{}{},
		limiter: rate.NewLimiter(rate.Inf, 2*uploadPiece)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	for _, o := range opts {
		o(s)
	}
	_ = h.Handle(Protocol, s.handle) // fails only for swarm's own protocols
	return s
}

// SetUploadRate sets the upload limit in bytes per second; 0 or less
// lifts it.
func (s *Server) SetUploadRate(bytesPerSec int64) {
	if bytesPerSec <= 0 {
		s.limiter.SetLimit(rate.Inf)
		return
	}
	s.limiter.SetLimit(rate.Limit(bytesPerSec))
}

// SetPaused holds uploads (true) or lets them go on (false). A paused
// server finishes the 64 KiB piece it is writing and sends nothing more
// until it resumes; requests still queue, so a short pause costs a
// fetcher time, not errors (its stall timeout is tens of seconds). The
// node pauses uploads briefly to measure its inference with none running.
func (s *Server) SetPaused(p bool) {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	switch {
	case p && s.resume == nil:
		s.resume = make(chan struct{})
	case !p && s.resume != nil:
		close(s.resume)
		s.resume = nil
	}
}

// paused returns the channel that closes when a pause ends; nil: not
// paused.
func (s *Server) paused() chan struct{} {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	return s.resume
}

// Sent is the bytes of chunk data the server has written to fetchers.
func (s *Server) Sent() int64 { return s.sent.Load() }

// ServeFile serves the file at path under m. The file's size must be the
// manifest's; its content is trusted (the manifest was built from it, or
// it was assembled from verified chunks).
func (s *Server) ServeFile(m *Manifest, path string) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	st, err := fh.Stat()
	if err == nil && st.Size() != m.FileSize {
		err = fmt.Errorf("%w: %s has %d bytes, the manifest %d", ErrManifest, path, st.Size(), m.FileSize)
	}
	if err == nil {
		err = s.serve(m, fh, fh)
	}
	if err != nil {
		fh.Close()
	}
	return err
}

// ServeReaderAt serves m's chunks read from r, which must hold the
// manifest's FileSize bytes. The server does not close r.
func (s *Server) ServeReaderAt(m *Manifest, r io.ReaderAt) error { return s.serve(m, r, nil) }

// ServeSlice serves the chunks that the slice sl holds, in place of
// whatever was served of its model; a request for another chunk of the
// model is answered "no such chunk", which a Fetcher takes as "ask
// another holder". The server closes sl when it is replaced or closed.
func (s *Server) ServeSlice(sl *SliceReader) error {
	return s.serveAs(served{m: sl.m, c: sl, sl: sl})
}

func (s *Server) serve(m *Manifest, r io.ReaderAt, c io.Closer) error {
	return s.serveAs(served{m: m, r: r, c: c})
}

func (s *Server) serveAs(f served) error {
	m := f.m
	if err := m.validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if old, ok := s.files[m.Fingerprint]; ok && old.c != nil {
		old.c.Close()
	}
	s.files[m.Fingerprint] = f
	return nil
}

// Close stops serving: it removes the handler, resets the streams being
// served, waits for their handlers to return and closes the files.
func (s *Server) Close() error {
	_ = s.h.Handle(Protocol, nil)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.cancel()
	for st := range s.streams {
		st.Reset()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.files {
		if f.c != nil {
			f.c.Close()
		}
	}
	s.files = nil
	return nil
}

// enter registers a stream; it fails once the server is closed, and
// answers busy above the per-peer bound.
func (s *Server) enter(st *swarm.Stream, p peer.ID) (ok, busy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, false
	}
	s.wg.Add(1)
	s.streams[st] = struct{}{}
	if s.perPeer[p] >= s.perPeerMax {
		return true, true
	}
	s.perPeer[p]++
	return true, false
}

func (s *Server) leave(st *swarm.Stream, p peer.ID, counted bool) {
	s.mu.Lock()
	delete(s.streams, st)
	if counted {
		if s.perPeer[p]--; s.perPeer[p] <= 0 {
			delete(s.perPeer, p)
		}
	}
	s.mu.Unlock()
	s.wg.Done()
}

func (s *Server) lookup(fp string) (served, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.files[fp]
	return f, ok
}

func (s *Server) handle(st *swarm.Stream) {
	p := st.Peer()
	ok, busy := s.enter(st, p)
	if !ok {
		st.Reset()
		return
	}
	defer s.leave(st, p, !busy)
	if busy {
		st.SetWriteDeadline(time.Now().Add(s.idle))
		st.Write([]byte{statusBusy})
		st.Close()
		return
	}
	if err := st.SetService(ServiceName); err != nil {
		st.Reset()
		return
	}
	for {
		st.SetReadDeadline(time.Now().Add(s.idle))
		fp, idx, err := readRequest(st)
		if errors.Is(err, io.EOF) {
			st.Close()
			return
		}
		if err != nil {
			st.Reset() // out of step, or forged: nothing more from this stream
			return
		}
		if !s.pace(p) {
			st.Reset()
			return
		}
		st.SetWriteDeadline(time.Now().Add(s.idle))
		if err := s.answer(st, fp, idx); err != nil {
			st.Reset()
			return
		}
	}
}

// pace waits for p's turn under WithPeerRequestRate; false when the
// server closed meanwhile.
func (s *Server) pace(p peer.ID) bool {
	if s.peerRate == nil {
		return true
	}
	d := s.peerRate.Reserve(p, time.Now())
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// Paced is how many requests waited for their peer's turn.
func (s *Server) Paced() uint64 {
	if s.peerRate == nil {
		return 0
	}
	return s.peerRate.Denied()
}

// answer writes one response.
func (s *Server) answer(st *swarm.Stream, fp string, idx int) error {
	f, ok := s.lookup(fp)
	switch {
	case !ok:
		return writeStatus(st, statusUnknown)
	case idx >= f.m.NumChunks(), f.sl != nil && !f.sl.Has(idx):
		return writeStatus(st, statusNoChunk)
	}
	off, n := f.m.ChunkRange(idx)
	if err := st.Reserve(int(n)); err != nil {
		return writeStatus(st, statusBusy)
	}
	defer st.Release(int(n))
	bp, _ := s.bufs.Get().(*[]byte)
	if bp == nil || int64(cap(*bp)) < n {
		b := make([]byte, n)
		bp = &b
	}
	defer s.bufs.Put(bp)
	buf := (*bp)[:n]
	if f.sl != nil {
		if err := f.sl.ReadChunk(idx, buf); err != nil {
			return writeStatus(st, statusNoChunk)
		}
	} else if _, err := f.r.ReadAt(buf, off); err != nil {
		return writeStatus(st, statusFailed)
	}
	var hdr [5]byte
	hdr[0] = statusOK
	binary.BigEndian.PutUint32(hdr[1:], uint32(n))
	if _, err := st.Write(hdr[:]); err != nil {
		return err
	}
	if s.limiter.Limit() == rate.Inf && s.paused() == nil {
		n, err := st.Write(buf)
		s.sent.Add(int64(n))
		return err
	}
	for len(buf) > 0 {
		if ch := s.paused(); ch != nil {
			select {
			case <-ch:
			case <-s.ctx.Done():
				return s.ctx.Err()
			}
		}
		st.SetWriteDeadline(time.Now().Add(s.idle))
		p := buf[:min(len(buf), uploadPiece)]
		if err := s.limiter.WaitN(s.ctx, len(p)); err != nil {
			return err
		}
		n, err := st.Write(p)
		s.sent.Add(int64(n))
		if err != nil {
			return err
		}
		buf = buf[len(p):]
	}
	return nil
}

func writeStatus(w io.Writer, status byte) error {
	_, err := w.Write([]byte{status})
	return err
}
