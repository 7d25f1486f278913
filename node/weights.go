package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/node/weights"
	"github.com/stratanet/strata/swarm"
)

// The weights unit (node/weights) moves the model's weights between
// peers: it serves chunks, answers the info and manifest requests,
// fetches slices, and limits uploads. This file is its wiring: the
// replica it reads, the model a fetch opens, and its errors under the
// node's sentinels.

// FetchProgress is a node's fetch of weights from peers.
type FetchProgress = weights.Progress

// SliceFile is a slice of a model that a node fetched, in its data dir.
type SliceFile = weights.SliceFile

// Slices lists the finished slices of model fp under a node's data dir
// (where a node that joined without the file keeps what it fetched).
func Slices(dataDir, fp string) ([]SliceFile, error) { return weights.Slices(dataDir, fp) }

// SwarmModel asks the bootstrap peers, from a throwaway host, which model
// their swarm serves, and returns its fingerprint: what a node started
// with a model name it does not hold joins with (WithModelID). Every peer
// that answers must name the same model; an error wraps ErrConfig.
func SwarmModel(ctx context.Context, boot []peer.AddrInfo, opts ...swarm.Option) (string, error) {
	fp, err := weights.SwarmModel(ctx, boot, opts...)
	return fp, weightsErr(err)
}

// consSwarm is what node/weights reads of the consensus replica: none on
// a static map and while starting.
type consSwarm struct {
	cons *atomic.Pointer[consensus.Consensus]
}

func (s consSwarm) IsLeader() bool {
	c := s.cons.Load()
	return c != nil && c.IsLeader()
}

func (s consSwarm) Members() []peer.ID {
	c := s.cons.Load()
	if c == nil {
		return nil
	}
	var out []peer.ID
	for _, m := range c.Members() {
		if p, err := peer.Decode(m.ID); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func (s consSwarm) Manifest() []byte {
	if c := s.cons.Load(); c != nil {
		return c.State().Manifest()
	}
	return nil
}

// weightsErr gives an error of node/weights the node's sentinel as well
// (ErrConfig, ErrBadFrame, ErrUnknownModel, ErrNotServing), so that
// callers branch on the node's errors as before, and the node's
// sentinel's text in place of the package's: peers read these texts in
// control answers, and operators in errors and logs, as they always did.
func weightsErr(err error) error {
	if err == nil {
		return nil
	}
	for _, m := range [...]struct{ w, n error }{{weights.ErrConfig, ErrConfig}, {weights.ErrBadFrame, ErrBadFrame},
		{weights.ErrUnknownModel, ErrUnknownModel}, {weights.ErrNoManifest, ErrNotServing}} {
		if errors.Is(err, m.w) {
			return &nodeErr{err: err, from: m.w, sentinel: m.n}
		}
	}
	return err
}

// nodeErr is an error of node/weights (err, wrapping from) that also
// wraps the node's sentinel.
type nodeErr struct{ err, from, sentinel error }

func (e *nodeErr) Error() string {
	if rest, ok := strings.CutPrefix(e.err.Error(), e.from.Error()); ok {
		return e.sentinel.Error() + rest
	}
	return e.err.Error()
}

func (e *nodeErr) Unwrap() []error { return []error{e.err, e.sentinel} }

// openRemote opens the model the node knows by fingerprint only: the
// fetch (node/weights) gets its manifest and header from disk or peers,
// and the model is learnt from the header.
func openRemote(ctx context.Context, h *swarm.Host, fp, dir string, boot []peer.AddrInfo, threads int, uploadRate int64,
	log *zap.Logger) (*model, error) {
	f, hdr, err := weights.OpenRemote(ctx, weights.RemoteConfig{Net: h.Streams(), Dial: h.Connect, Fingerprint: fp, Dir: dir,
		Boot: boot, UploadRate: uploadRate, RequestRate: DefaultChunkRequestRate, RequestBurst: DefaultChunkRequestBurst, Log: log})
	if err != nil {
		return nil, weightsErr(err)
	}
	defer hdr.Close()
	hp := hdr.Params
	spec, err := hdr.File.ModelSpec()
	if err != nil {
		return nil, fmt.Errorf("%w: model %.16s: %w", ErrConfig, fp, err)
	}
	tok, err := engine.NewTokenizer(hdr.File)
	if err != nil {
		return nil, fmt.Errorf("%w: model %.16s: %w", ErrConfig, fp, err)
	}
	return &model{spec: spec, tok: tok, hash: ModelHash(fp), threads: threads, fetch: f, manifest: f.Manifest(),
		info: ModelInfo{Name: hp.Name, Fingerprint: fp, Layers: hp.Layers, Hidden: hp.Dim, Vocab: hp.Vocab, Context: hp.Context,
			ChatTemplate: tok.HasChatTemplate(), ChatSyntax: tok.ChatSyntax()}}, nil
}

// standIn opens the generated stand-in of a fetching node's model, on
// which it measures its hardware.
func standIn(f *weights.Remote, threads int) (*model, error) {
	path, err := f.StandIn()
	if err != nil {
		return nil, weightsErr(err)
	}
	return openModel(path, "", layers.Hardware{}, threads)
}
