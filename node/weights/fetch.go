package weights

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/slicefile"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/swarm"
	"github.com/stratanet/strata/swarm/chunks"
)

// SwarmModel asks the bootstrap peers, from a throwaway host, which model
// their swarm serves, and returns its fingerprint: what a node started
// with a model name it does not hold joins with (node.WithModelID). Every peer
// that answers must name the same model.
func SwarmModel(ctx context.Context, boot []peer.AddrInfo, opts ...swarm.Option) (string, error) {
	if len(boot) == 0 {
		return "", fmt.Errorf("%w: no bootstrap peers to ask for the swarm's model", ErrConfig)
	}
	h, err := swarm.New(ctx, append([]swarm.Option{swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"),
		swarm.WithDiscovery(false), swarm.WithRelayService(false)}, opts...)...)
	if err != nil {
		return "", err
	}
	defer h.Close()
	fp := ""
	var errs []error
	for _, b := range boot {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := h.Connect(cctx, b)
		var a manifestAnswer
		if err == nil {
			a, err = askManifest(cctx, h.Streams(), b.ID, "")
		}
		cancel()
		var m *chunks.Manifest
		if err == nil {
			m, err = decodeManifest(a.data, "")
		}
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", shortID(b.ID), err))
		case fp == "":
			fp = m.Fingerprint
		case m.Fingerprint != fp:
			return "", fmt.Errorf("%w: bootstrap peers serve different models (%.16s, %.16s): name one with --model-id", ErrConfig, fp, m.Fingerprint)
		}
	}
	if fp == "" {
		return "", fmt.Errorf("%w: no bootstrap peer told the swarm's model: %w", ErrConfig, errors.Join(errs...))
	}
	return fp, nil
}

// RemoteConfig is what a Remote needs of the node.
type RemoteConfig struct {
	Net Network // the host's streams
	// Dial connects to a bootstrap peer (the host's Connect); nil: the
	// peers are reached by ID alone.
	Dial func(ctx context.Context, ai peer.AddrInfo) error
	// Fingerprint is the model's.
	Fingerprint string
	// Dir is where the manifest, the header and the slices go.
	Dir string
	// Boot are the bootstrap peers: asked for the manifest, and
	// candidates to hold the file.
	Boot []peer.AddrInfo
	// Stall is how long a holder may keep a chunk before it is dropped
	// (0: 10 s).
	Stall time.Duration
	// UploadRate is the bytes/s for serving slice chunks (0: no limit);
	// RequestRate and RequestBurst pace each peer's chunk requests.
	UploadRate   int64
	RequestRate  float64
	RequestBurst int
	Log          *zap.Logger
}

// Remote is a node's fetch of weights from peers: the manifest, the
// directory its files go to, and progress. It also serves the chunks of
// the last slice it made.
type Remote struct {
	man   *chunks.Manifest
	data  []byte // man encoded, as the swarm's state must hold it
	dir   string
	net   Network
	self  peer.ID
	boot  []peer.AddrInfo
	swarm Swarm
	stall time.Duration
	log   *zap.Logger

	shape engine.HParams // the model's, for a stand-in to measure on

	uploadRate   int64 // bytes/s for serving slice chunks (0: no limit)
	requestRate  float64
	requestBurst int

	// progressed republishes the node's status, whose heartbeats carry
	// the fetch's progress to every node; nil: none. Called at most every
	// progressEvery.
	progressed func()
	lastNote   atomic.Int64 // unix ns of the last progressed call

	mu     sync.Mutex
	inUse  map[string]int // slices being fetched or loaded, by path
	srv    *chunks.Server // serves the chunks of the last slice made; nil: none yet
	closed bool
	// serving is whether srv serves a slice (answered in info requests).
	serving atomic.Bool

	done, total atomic.Int64  // the fetch in progress (total 0: none)
	fetched     atomic.Int64  // bytes fetched over the node's life
	reused      atomic.Int64  // bytes copied from older slices instead
	dropped     atomic.Int64  // holders dropped (lying, stalling) over its life
	rateBits    atomic.Uint64 // bytes/s of the last fetch, as float64 bits
}

// NewRemote is a fetch of the model whose encoded manifest the caller
// has already (OpenRemote gets it from disk or peers).
func NewRemote(cfg RemoteConfig, manifest []byte) (*Remote, error) {
	m, err := decodeManifest(manifest, cfg.Fingerprint)
	if err != nil {
		return nil, err
	}
	f := newRemote(cfg)
	f.man, f.data = m, manifest
	return f, nil
}

func newRemote(cfg RemoteConfig) *Remote {
	stall := cfg.Stall
	if stall <= 0 {
		stall = 10 * time.Second
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	return &Remote{dir: cfg.Dir, net: cfg.Net, self: cfg.Net.ID(), boot: cfg.Boot, swarm: noSwarm{}, stall: stall, log: log,
		uploadRate: cfg.UploadRate, requestRate: cfg.RequestRate, requestBurst: cfg.RequestBurst}
}

// Bind gives the fetch the node's replica and the republisher of the
// node's status, whose heartbeats carry the fetch's progress (nil:
// none). The node calls it once its parts exist, before anything fetches
// a slice: until then the bootstrap peers alone are candidates.
func (f *Remote) Bind(sw Swarm, progressed func()) {
	if sw == nil {
		sw = noSwarm{}
	}
	f.swarm, f.progressed = sw, progressed
}

func (f *Remote) rate() float64 { return math.Float64frombits(f.rateBits.Load()) }

// measured records a fetch's rate; a fetch of less than a chunk says
// little, so it is left out.
func (f *Remote) measured(bytes int64, took time.Duration) {
	if bytes >= f.man.ChunkSize && took > 0 {
		f.rateBits.Store(math.Float64bits(float64(bytes) / took.Seconds()))
	}
}

// progressEvery bounds how often a fetch republishes the node's status.
const progressEvery = 250 * time.Millisecond

// noteProgress republishes the status, at most every progressEvery.
func (f *Remote) noteProgress() {
	if f.progressed == nil {
		return
	}
	now, last := time.Now().UnixNano(), f.lastNote.Load()
	if now-last < int64(progressEvery) || !f.lastNote.CompareAndSwap(last, now) {
		return
	}
	f.progressed()
}

// Progress is the fetch's progress now.
func (f *Remote) Progress() Progress {
	return Progress{Done: f.done.Load(), Total: f.total.Load(), Fetched: f.fetched.Load(), Dropped: f.dropped.Load()}
}

// Reused is the bytes the node's fetches copied from its older slices
// rather than fetch.
func (f *Remote) Reused() int64 { return f.reused.Load() }

// Serving is whether the fetch serves the chunks of a slice to peers
// (what info answers tell).
func (f *Remote) Serving() bool { return f.serving.Load() }

// Manifest is the model's manifest, encoded as the swarm's state holds
// it.
func (f *Remote) Manifest() []byte { return f.data }

// Progress is a node's fetch of weights from peers.
type Progress struct {
	// Done and Total are the bytes of the fetch in progress (Total 0:
	// none in progress).
	Done, Total int64
	// Fetched is every byte this node fetched since it started.
	Fetched int64
	// Dropped counts the holders dropped (a bad chunk, a stall) since it
	// started.
	Dropped int64
}

// candidates are the peers that may hold the file: the members and the
// bootstrap peers.
func (f *Remote) candidates() []peer.ID {
	seen := map[peer.ID]bool{f.self: true}
	var out []peer.ID
	add := func(p peer.ID) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, b := range f.boot {
		add(b.ID)
	}
	for _, p := range f.swarm.Members() {
		add(p)
	}
	return out
}

// holders asks the candidates, in parallel, which of them serve the
// file's chunks, or a slice's, under the same manifest. Slice holders come
// first: they spare the file's holders, and lack the rest anyway.
func (f *Remote) holders(ctx context.Context) []peer.ID {
	cands := f.candidates()
	want := sha256.Sum256(f.data)
	kind := make([]int, len(cands)) // 0: none, 1: a slice, 2: the file
	var wg sync.WaitGroup
	for i, p := range cands {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, f.stall)
			defer cancel()
			in, err := askInfo(cctx, f.net, p)
			switch {
			case err != nil || in.manifest != want:
			case in.holds:
				kind[i] = 2
			case in.slice:
				kind[i] = 1
			}
		})
	}
	wg.Wait()
	var out []peer.ID
	for _, k := range []int{1, 2} {
		for i, p := range cands {
			if kind[i] == k {
				out = append(out, p)
			}
		}
	}
	return out
}

// serveSlice serves the chunks of the slice at path from now on, in place
// of the last one.
func (f *Remote) serveSlice(path string) {
	sl, err := slicefile.OpenSlice(f.man, path)
	if err != nil {
		f.log.Warn("fetch: slice not served to peers", zap.String("file", path), zap.Error(err))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		sl.Close()
		return
	}
	if f.srv == nil {
		f.srv = chunks.NewServer(f.net, chunks.WithUploadRate(f.uploadRate),
			chunks.WithPeerRequestRate(f.requestRate, f.requestBurst))
	}
	if err := f.srv.ServeSlice(sl); err != nil {
		sl.Close()
		f.log.Warn("fetch: slice not served to peers", zap.String("file", path), zap.Error(err))
		return
	}
	f.serving.Store(true)
	lo, hi := sl.Range()
	f.log.Info("fetch: serving the slice's chunks to peers", zap.Int("lo", lo), zap.Int("hi", hi), zap.Int("chunks", len(sl.Chunks())))
}

// Close stops serving the slice's chunks, for good.
func (f *Remote) Close() {
	f.mu.Lock()
	srv := f.srv
	f.closed = true
	f.mu.Unlock()
	f.serving.Store(false)
	if srv != nil {
		srv.Close()
	}
}

// oldSlices is the complete slices of other ranges on disk.
func (f *Remote) oldSlices(r layers.Range) []string {
	matches, _ := filepath.Glob(fpFile(f.dir, f.man.Fingerprint, "-*-*.gguf"))
	var out []string
	for _, p := range matches {
		if p != f.SlicePath(r) {
			out = append(out, p)
		}
	}
	return out
}

// fetcher gets the manifest's chunks, dropping (and counting) holders
// that lie or stall.
func (f *Remote) fetcher(opts ...chunks.FetchOption) *chunks.Fetcher {
	return chunks.NewFetcher(f.net, f.man, append([]chunks.FetchOption{chunks.WithStallTimeout(f.stall),
		chunks.WithOnDrop(func(p peer.ID, err error) {
			f.dropped.Add(1)
			f.log.Warn("fetch: holder dropped", zap.String("peer", shortID(p)), zap.Error(err))
		})}, opts...)...)
}

// headerChunks is the chunks that hold the file's header.
func (f *Remote) headerChunks() []int {
	var out []int
	for i := 0; int64(i)*f.man.ChunkSize < f.man.DataOffset; i++ {
		out = append(out, i)
	}
	return out
}

// seedPart starts the part file of a slice with the header chunks
// fetched at start, so that they are not fetched again.
func (f *Remote) seedPart(part string) error {
	if _, err := os.Stat(part); !errors.Is(err, os.ErrNotExist) {
		return err // nil: a fetch cut short left it; FetchSlice resumes it
	}
	hdr, err := os.Open(fpFile(f.dir, f.man.Fingerprint, ".header"))
	if err != nil {
		return err
	}
	defer hdr.Close()
	out, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	buf := make([]byte, f.man.ChunkSize)
	for _, i := range f.headerChunks() {
		off, n := f.man.ChunkRange(i)
		if _, err := hdr.ReadAt(buf[:n], off); err != nil {
			break
		}
		if !f.man.Verify(i, buf[:n]) {
			continue
		}
		if _, err := out.WriteAt(buf[:n], off); err != nil {
			out.Close()
			return err
		}
	}
	return out.Close()
}

// SlicePath is where the slice of r goes.
func (f *Remote) SlicePath(r layers.Range) string {
	return fpFile(f.dir, f.man.Fingerprint, fmt.Sprintf("-%d-%d.gguf", r.Start, r.End))
}

// Release unmarks a slice that Slice returned, once the caller loaded
// from it: Prune may remove it from then on.
func (f *Remote) Release(path string) { f.use(path, -1) }

// use marks the slice at path in use (by +1) or no longer (by -1), so
// that prune leaves it.
func (f *Remote) use(path string, by int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inUse == nil {
		f.inUse = map[string]int{}
	}
	if f.inUse[path] += by; f.inUse[path] <= 0 {
		delete(f.inUse, path)
	}
}

// Prune removes the slices (and unfinished parts) of ranges other than
// keep that no fetch or load uses: once the node serves keep, a restart
// needs only its slice. Layers loaded from a removed slice stay readable
// (the open file outlives its name).
func (f *Remote) Prune(keep layers.Range) {
	matches, err := filepath.Glob(fpFile(f.dir, f.man.Fingerprint, "-*-*.gguf*"))
	if err != nil {
		return
	}
	kp := f.SlicePath(keep)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range matches {
		base := strings.TrimSuffix(strings.TrimSuffix(p, chunks.PartSuffix), chunks.EdgesSuffix)
		if !strings.HasSuffix(base, ".gguf") || base == kp || f.inUse[base] > 0 {
			continue // a slice being written, the one kept, or one in use
		}
		if err := os.Remove(p); err == nil {
			f.log.Info("fetch: slice no longer needed, removed", zap.String("file", p))
		}
	}
}

// Slice makes the slice of r on disk, fetching what it lacks, and
// returns its path, marked in use: the caller releases it (Release) once
// it loaded from it.
func (f *Remote) Slice(ctx context.Context, r layers.Range) (path string, err error) {
	path = f.SlicePath(r)
	f.use(path, 1)
	defer func() {
		if err != nil {
			f.use(path, -1)
		}
	}()
	switch err := slicefile.CheckSlice(f.man, r.Start, r.End, path); {
	case err == nil:
		f.serveSlice(path)
		return path, nil // fetched before (a restart)
	case !errors.Is(err, os.ErrNotExist):
		f.log.Warn("fetch: slice on disk is not the one needed; fetching it again", zap.String("file", path), zap.Error(err))
		if err := os.Remove(path); err != nil {
			return "", err
		}
	}
	if sm := f.swarm.Manifest(); sm != nil && !bytes.Equal(sm, f.data) {
		return "", fmt.Errorf("%w: the swarm's manifest is not the one this node fetched", ErrConfig)
	}
	want, err := f.man.RangeBytes(r.Start, r.End)
	if err != nil {
		return "", err
	}
	var holders []peer.ID
	for {
		if holders = f.holders(ctx); len(holders) > 0 {
			break
		}
		f.log.Info("fetch: no holder of the model file answers yet", zap.Stringer("range", r))
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
	if err := f.seedPart(path + chunks.PartSuffix); err != nil {
		f.log.Warn("fetch: header chunks not reused", zap.Error(err))
	}
	// A node moved to a new range has the chunks the two ranges share.
	f.mu.Lock() // prune holds it: the old slices stay while they are read
	reused, err := slicefile.ReuseSlices(f.man, r.Start, r.End, path, f.oldSlices(r))
	f.mu.Unlock()
	if err != nil {
		f.log.Warn("fetch: chunks of older slices not reused", zap.Error(err))
	} else if reused > 0 {
		f.reused.Add(reused)
		f.log.Info("fetch: chunks reused from older slices", zap.Stringer("range", r), zap.Int64("bytes", reused))
	}
	f.done.Store(0)
	f.total.Store(want)
	defer f.total.Store(0)
	start := time.Now()
	f.log.Info("fetch: fetching", zap.Stringer("range", r), zap.Int64("bytes", want), zap.Int("holders", len(holders)))
	fe := f.fetcher(chunks.WithProgress(func(done, total int64) {
		f.done.Store(done)
		f.total.Store(total)
		f.noteProgress()
	}))
	res, err := slicefile.FetchSlice(ctx, fe, r.Start, r.End, holders, path)
	f.fetched.Add(res.Bytes)
	if err != nil {
		return "", fmt.Errorf("fetch of %v: %w", r, err)
	}
	took := time.Since(start)
	f.measured(res.Bytes, took)
	f.serveSlice(path)
	f.log.Info("fetch: slice ready", zap.Stringer("range", r), zap.Int64("fetched", res.Bytes),
		zap.Int("dropped", len(res.Dropped)), zap.Duration("took", took.Round(time.Millisecond)),
		zap.Float64("mb_per_s", float64(res.Bytes)/1e6/max(took.Seconds(), 1e-9)))
	return path, nil
}

// Header is the model file's header, fetched: its GGUF metadata and
// tensor table, read from a sparse file that holds the header's chunks.
type Header struct {
	File   *engine.File
	Params engine.HParams
	fh     *os.File
}

// Close closes the file the header reads from.
func (h *Header) Close() error { return h.fh.Close() }

// OpenRemote opens the model the node knows by fingerprint only: it gets
// the manifest (from disk, else from the bootstrap peers) and the file's
// header chunks (from disk, else from holders), and reads the model's
// header, which the caller closes once it has learnt the model from it.
func OpenRemote(ctx context.Context, cfg RemoteConfig) (*Remote, *Header, error) {
	fp, dir, boot := cfg.Fingerprint, cfg.Dir, cfg.Boot
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	f := newRemote(cfg)
	log := f.log
	manPath := fpFile(dir, fp, ".manifest")
	if b, err := os.ReadFile(manPath); err == nil {
		if m, err := decodeManifest(b, fp); err == nil {
			f.man, f.data = m, b
		} else {
			log.Warn("fetch: manifest on disk unreadable; asking peers", zap.String("file", manPath), zap.Error(err))
		}
	}
	for f.man == nil {
		var errs []error
		for _, b := range boot {
			if b.ID == f.self {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, f.stall)
			if len(b.Addrs) > 0 && cfg.Dial != nil {
				_ = cfg.Dial(cctx, b)
			}
			a, err := askManifest(cctx, f.net, b.ID, fp)
			cancel()
			if err == nil {
				var m *chunks.Manifest
				if m, err = decodeManifest(a.data, fp); err == nil {
					f.man, f.data = m, a.data
					break
				}
			}
			errs = append(errs, fmt.Errorf("%s: %w", shortID(b.ID), err))
		}
		if f.man != nil {
			break
		}
		if len(boot) == 0 {
			return nil, nil, fmt.Errorf("%w: a node without the model file needs bootstrap peers to learn the model from", ErrConfig)
		}
		log.Info("fetch: waiting for a peer that knows the model's manifest", zap.Error(errors.Join(errs...)))
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("%w: no manifest of model %.16s: %w", ErrConfig, fp, errors.Join(append(errs, ctx.Err())...))
		case <-time.After(time.Second):
		}
	}
	if err := writeAtomic(manPath, f.data); err != nil {
		return nil, nil, err
	}
	hdr, err := f.header(ctx)
	if err != nil {
		return nil, nil, err
	}
	ef, err := engine.ReadFile(hdr, f.man.FileSize)
	if err != nil {
		hdr.Close()
		return nil, nil, fmt.Errorf("%w: header of model %.16s: %w", ErrConfig, fp, err)
	}
	hp, err := engine.ReadHParams(ef)
	if err != nil {
		hdr.Close()
		return nil, nil, fmt.Errorf("%w: model %.16s: %w", ErrConfig, fp, err)
	}
	f.shape = hp
	return f, &Header{File: ef, Params: hp, fh: hdr}, nil
}

// header returns the file's header chunks, verified, in a sparse file of
// the file's size: from disk, else fetched from the holders.
func (f *Remote) header(ctx context.Context) (*os.File, error) {
	path := fpFile(f.dir, f.man.Fingerprint, ".header")
	fh, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := fh.Truncate(f.man.FileSize); err != nil {
		fh.Close()
		return nil, err
	}
	var missing []int
	buf := make([]byte, f.man.ChunkSize)
	for _, i := range f.headerChunks() {
		off, n := f.man.ChunkRange(i)
		if _, err := fh.ReadAt(buf[:n], off); err != nil && !errors.Is(err, io.EOF) {
			fh.Close()
			return nil, err
		}
		if !f.man.Verify(i, buf[:n]) {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return fh, nil
	}
	for {
		holders := f.holders(ctx)
		if len(holders) > 0 {
			fe := f.fetcher()
			start := time.Now()
			res, err := fe.Fetch(ctx, missing, holders, func(i int, data []byte) error {
				off, _ := f.man.ChunkRange(i)
				_, err := fh.WriteAt(data, off)
				return err
			})
			f.fetched.Add(res.Bytes)
			if err == nil {
				f.measured(res.Bytes, time.Since(start))
				err = fh.Sync()
			}
			if err == nil {
				return fh, nil
			}
			f.log.Warn("fetch: header", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			fh.Close()
			return nil, fmt.Errorf("%w: header of model %.16s not fetched: %w", ErrConfig, f.man.Fingerprint, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// StandIn is the path of a generated two-layer model of the model's
// shape (F32, a small vocabulary), on which a node without weights
// measures its hardware; made on first use, in the fetch's directory.
func (f *Remote) StandIn() (string, error) {
	hp := f.shape
	c := engine.DefaultGenConfig()
	if hp.Arch == "llama" || hp.Arch == "qwen2" || hp.Arch == "qwen3" || hp.Arch == "phi3" || hp.Arch == "qwen3moe" {
		c.Arch = hp.Arch
	}
	c.Layers, c.Dim, c.Heads, c.KVHeads, c.FFN = 2, hp.Dim, hp.Heads, hp.KVHeads, hp.FFN
	if hp.HeadDim != hp.Dim/hp.Heads {
		c.HeadDim = hp.HeadDim
	}
	if hp.MoE() {
		// A token's compute is its used experts'; twice that many experts
		// keep the file small while routing still spreads.
		c.Experts, c.ExpertsUsed, c.ExpertFFN = min(hp.Experts, 2*hp.ExpertsUsed), hp.ExpertsUsed, hp.ExpertFFN
	}
	if hp.Arch == "deepseek2" {
		// Its own layer: latent attention of the model's ranks, and (the
		// measured layer, 1, being past the one leading dense layer) its
		// experts with their shared ones; routing without groups.
		c.Arch, c.HeadDim = "deepseek2", hp.NopeDims+hp.RopeDims
		c.DeepSeek2 = engine.DeepSeek2Gen{QLoraRank: hp.QLoraRank, KVLoraRank: hp.KVLoraRank, RopeDims: hp.RopeDims,
			VHeadDim: hp.VHeadDim, SharedExperts: hp.SharedExperts, KVB: !hp.MLA, Softmax: hp.ExpertGating != 2,
			WeightsScale: hp.ExpertWeightsScale}
		if hp.MoE() {
			c.DeepSeek2.LeadingDense = 1
		}
	}
	path := fpFile(f.dir, f.man.Fingerprint, "-standin.gguf")
	if _, err := os.Stat(path); err != nil {
		tmp := path + ".tmp"
		if err := engine.GenerateFile(tmp, c); err != nil {
			return "", fmt.Errorf("%w: stand-in model to measure on: %w", ErrConfig, err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return "", err
		}
	}
	return path, nil
}
