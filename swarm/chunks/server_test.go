package chunks

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/swarm"
	"github.com/stratanet/strata/swarm/chunks/chunkstest"
)

func openChunkStream(t *testing.T, from, to *swarm.Host) *swarm.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := from.Streams().Open(ctx, to.ID(), Protocol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Reset() })
	s.SetDeadline(time.Now().Add(60 * time.Second))
	return s
}

// status sends a request and reads the status byte; for StatusOK it reads
// the chunk too.
func request(t *testing.T, s *swarm.Stream, fp string, idx int) (byte, []byte) {
	t.Helper()
	if _, err := s.Write(encodeRequest(fp, idx)); err != nil {
		t.Fatal(err)
	}
	var st [1]byte
	if _, err := io.ReadFull(s, st[:]); err != nil {
		t.Fatal(err)
	}
	if st[0] != statusOK {
		return st[0], nil
	}
	var n [4]byte
	if _, err := io.ReadFull(s, n[:]); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(s, data); err != nil {
		t.Fatal(err)
	}
	return st[0], data
}

// reads until the stream fails or ends, and says whether any byte came.
func drained(s *swarm.Stream) (gotData bool, err error) {
	var b [1]byte
	n, err := s.Read(b[:])
	return n > 0, err
}

func TestServerRequests(t *testing.T) {
	path, m := sixLayers(t)
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	srv := chunkstest.NewHost(t)
	s := NewServer(srv.Streams())
	defer s.Close()
	if err := s.ServeFile(m, path); err != nil {
		t.Fatal(err)
	}
	// A file of another size than the manifest's is refused.
	short := filepath.Join(t.TempDir(), "short.gguf")
	os.WriteFile(short, file[:len(file)-1], 0o644)
	if err := s.ServeFile(m, short); !errors.Is(err, ErrManifest) {
		t.Fatalf("short file served: %v", err)
	}
	me := chunkstest.NewHost(t)
	chunkstest.Connect(t, me, srv)

	st := openChunkStream(t, me, srv)
	for _, i := range []int{0, 7, m.NumChunks() - 1} {
		code, data := request(t, st, m.Fingerprint, i)
		off, n := m.ChunkRange(i)
		if code != statusOK || !bytes.Equal(data, file[off:off+n]) {
			t.Fatalf("chunk %d: status %d, %d bytes", i, code, len(data))
		}
	}
	if code, _ := request(t, st, m.Fingerprint, m.NumChunks()); code != statusNoChunk {
		t.Fatalf("chunk past the end: status %d", code)
	}
	if code, _ := request(t, st, "another-model", 0); code != statusUnknown {
		t.Fatalf("unknown model: status %d", code)
	}

	// A frame declaring a huge request, and a malformed one, end the stream
	// without an answer.
	for name, frame := range map[string][]byte{
		"oversized": {0x40, 0, 0, 0, 1, 2, 3},
		"empty fp":  {0, 0, 0, 2, 0, 0},
		"trailing":  append(encodeRequest("fp", 1), 0),
		"truncated": {0, 0, 0, 9, 1, 'x'},
	} {
		if name == "trailing" {
			binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
		}
		st := openChunkStream(t, me, srv)
		st.Write(frame)
		if name == "truncated" {
			st.CloseWrite()
		}
		if got, err := drained(st); got || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s request: data %v, err %v", name, got, err)
		}
	}
	// The server still serves.
	if code, _ := request(t, openChunkStream(t, me, srv), m.Fingerprint, 1); code != statusOK {
		t.Fatalf("after bad requests: status %d", code)
	}
}

// A peer gets at most the bound of streams; one more is answered busy,
// and a slot freed is a stream served again.
func TestServerStreamsPerPeer(t *testing.T) {
	path, m := sixLayers(t)
	srv := chunkstest.NewHost(t)
	s := NewServer(srv.Streams(), WithStreamsPerPeer(2))
	defer s.Close()
	if err := s.ServeFile(m, path); err != nil {
		t.Fatal(err)
	}
	me := chunkstest.NewHost(t)
	chunkstest.Connect(t, me, srv)
	a, b := openChunkStream(t, me, srv), openChunkStream(t, me, srv)
	for _, st := range []*swarm.Stream{a, b} {
		if code, _ := request(t, st, m.Fingerprint, 0); code != statusOK {
			t.Fatalf("status %d", code)
		}
	}
	c := openChunkStream(t, me, srv)
	if code, _ := request(t, c, m.Fingerprint, 0); code != statusBusy {
		t.Fatalf("third stream: status %d, want busy", code)
	}
	if _, err := drained(c); !errors.Is(err, io.EOF) {
		t.Fatalf("busy stream not closed: %v", err)
	}
	a.Close()
	// The server frees the slot when it sees the stream close, which no
	// event tells this side: ask again every 20 ms.
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		code, _ := request(t, openChunkStream(t, me, srv), m.Fingerprint, 0)
		if code == statusOK {
			break
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("a freed slot is not served again")
		}
	}
}

// A host whose resource manager grants a peer's chunk streams less memory
// than a chunk answers busy, and a fetch from it fails with
// ErrUnavailable. (Not parallel: it lowers swarm's limit for the one host
// made meanwhile.)
func TestServerResourceManager(t *testing.T) {
	path, m := sixLayers(t)
	saved := slices.Clone(swarm.PeerStreamLimits)
	for i := range swarm.PeerStreamLimits {
		if swarm.PeerStreamLimits[i].Protocol == Protocol {
			swarm.PeerStreamLimits[i].Memory = testChunk / 2
		}
	}
	srv := chunkstest.NewHost(t)
	copy(swarm.PeerStreamLimits, saved)
	s := NewServer(srv.Streams())
	defer s.Close()
	if err := s.ServeFile(m, path); err != nil {
		t.Fatal(err)
	}
	me := chunkstest.NewHost(t)
	chunkstest.Connect(t, me, srv)
	if code, _ := request(t, openChunkStream(t, me, srv), m.Fingerprint, 0); code != statusBusy {
		t.Fatalf("status %d, want busy", code)
	}
	_, err := NewFetcher(me.Streams(), m).Fetch(context.Background(), []int{0, 1, 2}, []peer.ID{srv.ID()}, func(int, []byte) error { return nil })
	if !errors.Is(err, ErrNoHolders) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("fetch from a host out of memory: %v", err)
	}
}

func FuzzRequest(f *testing.F) {
	f.Add(encodeRequest("fp", 3)[4:])
	f.Fuzz(func(t *testing.T, b []byte) {
		fp, idx, err := decodeRequest(b)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error without ErrProtocol: %v", err)
			}
			return
		}
		if !bytes.Equal(encodeRequest(fp, idx)[4:], b) {
			t.Fatal("decoded request does not re-encode to its bytes")
		}
		// Framed, it reads back through readRequest.
		fp2, idx2, err := readRequest(bytes.NewReader(encodeRequest(fp, idx)))
		if err != nil || fp2 != fp || idx2 != idx {
			t.Fatalf("framed: %q %d %v", fp2, idx2, err)
		}
	})
}

// An upload limit holds for all peers together: two fetchers at once take
// at least as long as their bytes at the limit (less the limiter's burst).
// Only a lower bound on time is asserted, which load cannot break.
func TestServerUploadRate(t *testing.T) {
	path, m := sixLayers(t)
	const limit = 1 << 20 // 1 MiB/s
	srv := chunkstest.NewHost(t)
	s := NewServer(srv.Streams(), WithUploadRate(limit))
	defer s.Close()
	if err := s.ServeFile(m, path); err != nil {
		t.Fatal(err)
	}
	a, b := chunkstest.NewHost(t), chunkstest.NewHost(t)
	chunkstest.Connect(t, a, srv)
	chunkstest.Connect(t, b, srv)
	chunks := make([]int, 12) // 12 × 64 KiB per fetcher, 1.5 MiB in all
	for i := range chunks {
		chunks[i] = i + 10
	}
	start := time.Now()
	errs := make(chan error, 2)
	for _, h := range []*swarm.Host{a, b} {
		go func() {
			_, err := NewFetcher(h.Streams(), m).Fetch(context.Background(), chunks, []peer.ID{srv.ID()}, func(int, []byte) error { return nil })
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	total := 2 * m.Bytes(chunks)
	floor := time.Duration(float64(total-2*uploadPiece) / limit * float64(time.Second))
	if elapsed < floor {
		t.Fatalf("%d bytes in %v: faster than %d B/s allows (%v)", total, elapsed, limit, floor)
	}
	t.Logf("%d bytes in %v at a limit of %d B/s", total, elapsed, limit)
	// Lifted, it no longer waits on the limiter (nothing to assert on time).
	s.SetUploadRate(0)
	if _, err := NewFetcher(a.Streams(), m).Fetch(context.Background(), chunks, []peer.ID{srv.ID()}, func(int, []byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// readSignal reports each read on a channel before doing it.
type readSignal struct {
	r    io.ReaderAt
	read chan<- struct{}
}

func (r readSignal) ReadAt(p []byte, off int64) (int, error) {
	select {
	case r.read <- struct{}{}:
	default:
	}
	return r.r.ReadAt(p, off)
}

// A paused server reads a requested chunk but sends none of it until it
// resumes; then the fetch completes and Sent counts every byte. Pausing
// an unlimited server takes effect too (it writes in pieces then).
func TestServerPause(t *testing.T) {
	path, m := sixLayers(t)
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	srv, cli := chunkstest.NewHost(t), chunkstest.NewHost(t)
	s := NewServer(srv.Streams())
	defer s.Close()
	read := make(chan struct{}, 1)
	if err := s.ServeReaderAt(m, readSignal{r: fh, read: read}); err != nil {
		t.Fatal(err)
	}
	chunkstest.Connect(t, cli, srv)
	want := []int{3, 4, 5}
	s.SetPaused(true)
	s.SetPaused(true) // twice is once
	done := make(chan error, 1)
	go func() {
		_, err := NewFetcher(cli.Streams(), m).Fetch(context.Background(), want, []peer.ID{srv.ID()}, func(int, []byte) error { return nil })
		done <- err
	}()
	select {
	case <-read:
	case err := <-done:
		t.Fatalf("fetch ended before the server read a chunk: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no chunk requested in 30 s")
	}
	// Nothing may arrive while paused. Waiting a while can only miss a
	// bug on a slow machine, never fail a correct server.
	select {
	case err := <-done:
		t.Fatalf("fetch completed while the server was paused (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	if n := s.Sent(); n != 0 {
		t.Fatalf("sent %d bytes while paused", n)
	}
	s.SetPaused(false)
	s.SetPaused(false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("fetch did not complete in 60 s after resuming")
	}
	if got, total := s.Sent(), m.Bytes(want); got != total {
		t.Fatalf("Sent() = %d, fetched %d", got, total)
	}
}

// TestServerPeerRequestRate: a peer asking for chunks as fast as it can is
// answered at its rate (its requests past the burst wait their turn, none
// refused), while another peer is answered meanwhile.
func TestServerPeerRequestRate(t *testing.T) {
	const rate, burst, n = 20, 4, 60
	path, m := sixLayers(t)
	srv := chunkstest.NewHost(t)
	s := NewServer(srv.Streams(), WithPeerRequestRate(rate, burst))
	defer s.Close()
	if err := s.ServeFile(m, path); err != nil {
		t.Fatal(err)
	}
	flood, calm := chunkstest.NewHost(t), chunkstest.NewHost(t)
	chunkstest.Connect(t, flood, srv)
	chunkstest.Connect(t, calm, srv)
	fst, cst := openChunkStream(t, flood, srv), openChunkStream(t, calm, srv)

	var served atomic.Int64
	start := time.Now()
	done := make(chan time.Duration, 1)
	past := make(chan struct{}) // the flood is past its burst
	go func() {
		for i := range n {
			if code, _ := request(t, fst, m.Fingerprint, i%m.NumChunks()); code != statusOK {
				t.Errorf("flood request %d: status %d", i, code)
			}
			if served.Add(1) == 2*burst {
				close(past)
			}
		}
		done <- time.Since(start)
	}()
	<-past
	for i := range burst {
		if code, _ := request(t, cst, m.Fingerprint, i); code != statusOK {
			t.Fatalf("calm request %d: status %d", i, code)
		}
	}
	if got := served.Load(); got >= n {
		t.Fatalf("the calm peer was answered only after the flood's %d requests", got)
	}
	took := <-done
	// n answers need n − burst tokens past the burst: (n − burst)/rate.
	if min := time.Duration(float64(n-burst) / rate * float64(time.Second)); took < min*99/100 {
		t.Fatalf("%d requests answered in %v, faster than the rate allows (%v)", n, took, min)
	}
	if s.Paced() == 0 {
		t.Fatal("no request paced")
	}
	t.Logf("flood: %d answers in %v, %d paced", n, took, s.Paced())
}
