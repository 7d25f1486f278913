package weights

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/internal/codec"
	"github.com/stratanet/strata/swarm/chunks"
)

// What a node holds and how to get it, asked on the swarm's control
// protocol: the info request (what of the model a peer holds, its fetch
// rate) and the manifest request (the file's manifest, in pages). The
// chunks themselves move on /strata/chunk/1 (chunks.Fetcher, fetch.go).

// manifestReqMagic starts a node control request for the manifest of
// the model whose fingerprint follows. The answer is a flags byte (bit 0:
// the answerer holds the whole file and serves its chunks) and the
// encoded manifest: what a joiner learns the model from. A manifest
// larger than manifestPage (it outgrows a control frame) is answered in
// pages: flag bit 3 (manifestPaged) is set, a uvarint of the manifest's
// whole length follows the flags, then its first manifestPage bytes; the
// asker gets the rest with manifestPageMagic requests, a uvarint offset
// then the fingerprint, answered alike from that offset.
const (
	manifestReqMagic  = "SMF1"
	manifestPageMagic = "SMP1"
	manifestPaged     = 8
	// manifestPage is the most manifest bytes one answer carries: well
	// inside the default control frame (swarm.DefaultMaxCtlFrame).
	manifestPage = 1 << 20
)

// infoReqMagic starts a node control request for what it holds of the
// model. The answer (infoLen bytes) is a flags byte (bit 0: it holds the
// whole file and serves its chunks; bit 1: it has no file and fetches
// from peers), the rate in bytes/s it measured on its last fetch (float64
// bits, big-endian; 0: none yet) and the SHA-256 of the manifest it holds
// or serves under (zero: none). Bit 2 of the flags: it serves the chunks
// of the slice it fetched (see chunks.SliceReader); a fetcher asks it
// first and the file's holders for what it lacks.
const infoReqMagic = "SMI1"

const (
	holdsFile  = 1
	fetches    = 2
	holdsSlice = 4
	infoLen    = 1 + 8 + sha256.Size
)

// IsInfoRequest is whether a control request asks what this node holds.
func IsInfoRequest(req []byte) bool { return string(req) == infoReqMagic }

// nodeInfo is one node's answer to an info request.
type nodeInfo struct {
	holds, fetches bool
	slice          bool // serves the chunks of a slice
	rate           float64
	manifest       [sha256.Size]byte
}

// AnswerInfo answers an info request.
func (w *Server) AnswerInfo() []byte {
	b := make([]byte, infoLen)
	switch {
	case w.remote != nil:
		b[0] = fetches
		if w.remote.serving.Load() {
			b[0] |= holdsSlice
		}
		binary.BigEndian.PutUint64(b[1:], math.Float64bits(w.remote.rate()))
	case w.chunks != nil:
		b[0] = holdsFile
	}
	if w.manifest != nil {
		id := sha256.Sum256(w.manifest)
		copy(b[9:], id[:])
	}
	return b
}

func askInfo(ctx context.Context, net Network, p peer.ID) (nodeInfo, error) {
	resp, err := net.Call(ctx, p, []byte(infoReqMagic))
	if err != nil {
		return nodeInfo{}, err
	}
	if len(resp) != infoLen {
		return nodeInfo{}, fmt.Errorf("%w: info answer of %d bytes", ErrBadFrame, len(resp))
	}
	in := nodeInfo{holds: resp[0]&holdsFile != 0, fetches: resp[0]&fetches != 0, slice: resp[0]&holdsSlice != 0,
		rate: math.Float64frombits(binary.BigEndian.Uint64(resp[1:]))}
	copy(in.manifest[:], resp[9:])
	if !(in.rate >= 0) || math.IsInf(in.rate, 0) {
		in.rate = 0
	}
	return in, nil
}

// fetchRates is what the leader knows of its members' fetch rates,
// refreshed by pollRates; consensus reads it at every decision.
type fetchRates struct {
	mu sync.Mutex
	m  map[peer.ID]float64
}

// FetchRate is member p's last fetch rate in bytes/s, as this node
// learnt it while leading (consensus.FetchRates).
func (w *Server) FetchRate(p peer.ID) (float64, bool) { return w.rates.get(p) }

func (r *fetchRates) get(p peer.ID) (float64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.m[p]
	return v, ok
}

// PollRates asks every member for its fetch rate while this node leads,
// every interval, until ctx ends.
func (w *Server) PollRates(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !w.swarm.IsLeader() {
			continue
		}
		m := map[peer.ID]float64{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, p := range w.swarm.Members() {
			if p == w.self {
				continue
			}
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, every)
				defer cancel()
				if in, err := askInfo(cctx, w.net, p); err == nil && in.fetches && in.rate > 0 {
					mu.Lock()
					m[p] = in.rate
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if f := w.remote; f != nil && f.rate() > 0 {
			m[w.self] = f.rate()
		}
		w.rates.mu.Lock()
		w.rates.m = m
		w.rates.mu.Unlock()
	}
}

// IsManifestRequest is whether a control request asks for the model's
// manifest or a page of it.
func IsManifestRequest(req []byte) bool {
	return hasMagic(req, manifestReqMagic) || hasMagic(req, manifestPageMagic)
}

func hasMagic(req []byte, magic string) bool {
	return len(req) >= len(magic) && string(req[:len(magic)]) == magic
}

// encodeManifestRequest is a request for the manifest of model fp ("":
// whatever model the answerer serves): from its start (manifestReqMagic),
// or with page the page at byte off of it (manifestPageMagic, a uvarint
// offset). The decoder refuses a fingerprint longer than
// consensus.MaxFingerprintLen and an offset past consensus.MaxManifestSize,
// which askManifest never sends.
func encodeManifestRequest(fp string, page bool, off uint64) []byte {
	w := codec.NewWriter(make([]byte, 0, len(manifestPageMagic)+binary.MaxVarintLen64+len(fp)), binary.BigEndian, ErrBadFrame)
	if page {
		w.Put([]byte(manifestPageMagic))
		w.Uvarint(off)
	} else {
		w.Put([]byte(manifestReqMagic))
	}
	w.Put([]byte(fp))
	return w.Bytes()
}

// decodeManifestRequest is encodeManifestRequest's mirror; off is 0
// unless page.
func decodeManifestRequest(req []byte) (fp string, page bool, off uint64, err error) {
	r := codec.NewReader(req, binary.BigEndian, ErrBadFrame)
	switch magic := string(r.Take(len(manifestReqMagic), "manifest request magic")); {
	case r.Err() != nil:
	case magic == manifestPageMagic:
		page = true
		off = r.Uvarint("manifest page offset", consensus.MaxManifestSize)
	case magic != manifestReqMagic:
		r.Fail("manifest request magic %q", magic)
	}
	if n := r.Len(); r.Err() == nil && n > consensus.MaxFingerprintLen {
		r.Fail("fingerprint of %d bytes (at most %d)", n, consensus.MaxFingerprintLen)
	}
	fp = string(r.Take(r.Len(), "fingerprint"))
	r.End()
	if err := r.Err(); err != nil {
		return "", false, 0, err
	}
	return fp, page, off, nil
}

// AnswerManifest answers a manifest request (or one for a page of it):
// from the file this node holds, else from its replica of the swarm's
// state. An empty fingerprint asks for the manifest of whatever model this
// node serves (SwarmModel).
func (w *Server) AnswerManifest(req []byte) ([]byte, error) {
	fp, page, off, err := decodeManifestRequest(req)
	if err != nil {
		return nil, err
	}
	if fp != "" && fp != w.fp {
		return nil, fmt.Errorf("%w: model %.16s, this node serves %.16s", ErrUnknownModel, fp, w.fp)
	}
	data := w.manifest
	if data == nil {
		data = w.swarm.Manifest()
	}
	if data == nil {
		return nil, fmt.Errorf("%w: no manifest of the model here yet", ErrNoManifest)
	}
	var flags byte
	if w.chunks != nil {
		flags |= holdsFile
	}
	if len(data) <= manifestPage && !page {
		return append([]byte{flags}, data...), nil // as before pages
	}
	if off >= uint64(len(data)) {
		return nil, fmt.Errorf("%w: manifest page at %d of a %d-byte manifest", ErrBadFrame, off, len(data))
	}
	p := data[off:min(uint64(len(data)), off+manifestPage)]
	b := binary.AppendUvarint([]byte{flags | manifestPaged}, uint64(len(data)))
	return append(b, p...), nil
}

// manifestAnswer is one peer's answer to a manifest request.
type manifestAnswer struct {
	holds bool
	data  []byte
}

// askManifest gets the manifest of model fp ("": whatever model p serves)
// from p, page by page when it is larger than one answer.
func askManifest(ctx context.Context, net Network, p peer.ID, fp string) (manifestAnswer, error) {
	if len(fp) > consensus.MaxFingerprintLen {
		return manifestAnswer{}, fmt.Errorf("%w: fingerprint of %d bytes (at most %d)", ErrUnknownModel, len(fp), consensus.MaxFingerprintLen)
	}
	resp, err := net.Call(ctx, p, encodeManifestRequest(fp, false, 0))
	if err != nil {
		return manifestAnswer{}, err
	}
	if len(resp) < 2 {
		return manifestAnswer{}, fmt.Errorf("%w: manifest answer of %d bytes", ErrBadFrame, len(resp))
	}
	a := manifestAnswer{holds: resp[0]&holdsFile != 0}
	if resp[0]&manifestPaged == 0 {
		a.data = resp[1:]
		return a, nil
	}
	var total uint64
	for {
		t, page, err := manifestPageOf(resp)
		switch {
		case err != nil:
			return manifestAnswer{}, err
		case a.data == nil && (t <= manifestPage || t > consensus.MaxManifestSize):
			return manifestAnswer{}, fmt.Errorf("%w: manifest of %d bytes in pages (want %d..%d)", ErrBadFrame, t, manifestPage+1, consensus.MaxManifestSize)
		case a.data == nil:
			total = t
			a.data = make([]byte, 0, total)
		case t != total:
			return manifestAnswer{}, fmt.Errorf("%w: manifest of %d bytes became %d between pages", ErrBadFrame, total, t)
		}
		if len(page) > int(total)-len(a.data) {
			return manifestAnswer{}, fmt.Errorf("%w: manifest page of %d bytes past its end", ErrBadFrame, len(page))
		}
		a.data = append(a.data, page...)
		if len(a.data) == int(total) {
			return a, nil
		}
		if resp, err = net.Call(ctx, p, encodeManifestRequest(fp, true, uint64(len(a.data)))); err != nil {
			return manifestAnswer{}, err
		}
	}
}

// manifestPageOf splits a paged manifest answer into the whole length
// and the page.
func manifestPageOf(resp []byte) (total uint64, page []byte, err error) {
	if len(resp) < 2 || resp[0]&manifestPaged == 0 {
		return 0, nil, fmt.Errorf("%w: manifest page answer of %d bytes", ErrBadFrame, len(resp))
	}
	total, k := binary.Uvarint(resp[1:])
	if k <= 0 || len(resp) == 1+k {
		return 0, nil, fmt.Errorf("%w: manifest page answer without a length or bytes", ErrBadFrame)
	}
	return total, resp[1+k:], nil
}

// decodeManifest decodes a manifest and checks that it is the model's
// (fp "": any model's).
func decodeManifest(data []byte, fp string) (*chunks.Manifest, error) {
	var m chunks.Manifest
	if err := m.UnmarshalBinary(data); err != nil {
		return nil, err
	}
	if fp != "" && m.Fingerprint != fp {
		return nil, fmt.Errorf("%w: manifest of model %.16s, want %.16s", ErrConfig, m.Fingerprint, fp)
	}
	return &m, nil
}
