package node

import (
	"io"
	"os"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/swarm"
	"github.com/stratanet/strata/swarm/chunks"
)

// weights is the node's share in moving the model's weights between
// peers: it serves the file's chunks (and, through the fetch, a fetched
// slice's), answers the info and manifest requests (fetchinfo.go), and
// while this node leads polls the members' fetch rates for the planner.
// It owns the chunk server, the file it reads and the rates; the fetch
// of weights from peers is the model's (fetchState, fetch.go).
type weights struct {
	self  peer.ID
	host  *swarm.Host
	model *model
	cons  *atomic.Pointer[consensus.Consensus] // nil inside: a static map, or still starting

	uploadRate  int64                         // bytes/s for the file's chunks (0: no limit)
	chunkReader func(io.ReaderAt) io.ReaderAt // a test's wrapper of the file; nil: none

	chunks    *chunks.Server // the file's chunks, served to peers; nil: none
	chunkFile *os.File       // what chunks reads, when chunkReader wraps it
	rates     fetchRates     // members' fetch rates, while leading
}

// serve starts the chunk server of a node that holds the file.
func (w *weights) serve(man *chunks.Manifest) error {
	w.chunks = chunks.NewServer(w.host.Streams(), chunks.WithUploadRate(w.uploadRate),
		chunks.WithPeerRequestRate(DefaultChunkRequestRate, DefaultChunkRequestBurst))
	if w.chunkReader == nil {
		return w.chunks.ServeFile(man, w.model.path)
	}
	fh, err := os.Open(w.model.path)
	if err != nil {
		return err
	}
	w.chunkFile = fh
	return w.chunks.ServeReaderAt(man, w.chunkReader(fh))
}

// servers are the chunk servers running now: the file's, and the
// fetched slice's.
func (w *weights) servers() []*chunks.Server {
	var out []*chunks.Server
	if w.chunks != nil {
		out = append(out, w.chunks)
	}
	if f := w.model.fetch; f != nil {
		f.mu.Lock()
		if f.srv != nil && !f.closed {
			out = append(out, f.srv)
		}
		f.mu.Unlock()
	}
	return out
}

// close stops every chunk server and closes the file they read.
func (w *weights) close() {
	if w.chunks != nil {
		w.chunks.Close()
	}
	if f := w.model.fetch; f != nil {
		f.closeServer()
	}
	if w.chunkFile != nil {
		w.chunkFile.Close()
	}
}

// progress is the node's fetch of weights from peers (zero for a node
// that holds the model file).
func (w *weights) progress() FetchProgress {
	f := w.model.fetch
	if f == nil {
		return FetchProgress{}
	}
	return FetchProgress{Done: f.done.Load(), Total: f.total.Load(), Fetched: f.fetched.Load(), Dropped: f.dropped.Load()}
}
