package weights

import (
	"io"
	"os"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/swarm/chunks"
)

// ServerConfig is what a Server needs of the node.
type ServerConfig struct {
	Net   Network // the host's streams: chunks on /strata/chunk/1, control calls
	Swarm Swarm   // the consensus replica; nil: none (a static map)

	// Fingerprint is the model this node serves.
	Fingerprint string
	// Path is the model file the node holds; "": none (it fetches).
	Path string
	// Manifest is the encoded chunk manifest of the file (built from it,
	// or fetched); nil: none.
	Manifest []byte
	// Remote is the node's fetch from peers; nil: it holds the file.
	Remote *Remote

	UploadRate int64 // bytes/s for the file's chunks (0: no limit)
	// RequestRate and RequestBurst pace each peer's chunk requests
	// (chunks.WithPeerRequestRate).
	RequestRate  float64
	RequestBurst int
	// ChunkReader wraps the file the chunk server reads (tests: a
	// liar); nil: none.
	ChunkReader func(io.ReaderAt) io.ReaderAt
}

// Server is the node's share in moving the model's weights between
// peers: it serves the file's chunks (and, through the Remote, a fetched
// slice's), answers the info and manifest requests (info.go), and while
// this node leads polls the members' fetch rates for the planner
// (FetchRate, consensus.FetchRates). It owns the chunk server, the file
// it reads and the rates; the fetch of weights from peers is the
// Remote's (fetch.go).
type Server struct {
	self     peer.ID
	net      Network
	swarm    Swarm
	fp       string
	path     string
	manifest []byte
	remote   *Remote

	uploadRate   int64
	requestRate  float64
	requestBurst int
	chunkReader  func(io.ReaderAt) io.ReaderAt

	chunks    *chunks.Server // the file's chunks, served to peers; nil: none
	chunkFile *os.File       // what chunks reads, when chunkReader wraps it
	rates     fetchRates     // members' fetch rates, while leading
}

// NewServer builds the server; it serves no chunks until Serve.
func NewServer(cfg ServerConfig) *Server {
	sw := cfg.Swarm
	if sw == nil {
		sw = noSwarm{}
	}
	return &Server{self: cfg.Net.ID(), net: cfg.Net, swarm: sw, fp: cfg.Fingerprint, path: cfg.Path,
		manifest: cfg.Manifest, remote: cfg.Remote, uploadRate: cfg.UploadRate, requestRate: cfg.RequestRate,
		requestBurst: cfg.RequestBurst, chunkReader: cfg.ChunkReader}
}

// Serve starts the chunk server of a node that holds the file.
func (w *Server) Serve(man *chunks.Manifest) error {
	w.chunks = chunks.NewServer(w.net, chunks.WithUploadRate(w.uploadRate),
		chunks.WithPeerRequestRate(w.requestRate, w.requestBurst))
	if w.chunkReader == nil {
		return w.chunks.ServeFile(man, w.path)
	}
	fh, err := os.Open(w.path)
	if err != nil {
		return err
	}
	w.chunkFile = fh
	return w.chunks.ServeReaderAt(man, w.chunkReader(fh))
}

// Servers are the chunk servers running now: the file's, and the
// fetched slice's.
func (w *Server) Servers() []*chunks.Server {
	var out []*chunks.Server
	if w.chunks != nil {
		out = append(out, w.chunks)
	}
	if f := w.remote; f != nil {
		f.mu.Lock()
		if f.srv != nil && !f.closed {
			out = append(out, f.srv)
		}
		f.mu.Unlock()
	}
	return out
}

// Close stops every chunk server and closes the file they read.
func (w *Server) Close() {
	if w.chunks != nil {
		w.chunks.Close()
	}
	if f := w.remote; f != nil {
		f.Close()
	}
	if w.chunkFile != nil {
		w.chunkFile.Close()
	}
}

// Progress is the node's fetch of weights from peers (zero for a node
// that holds the model file).
func (w *Server) Progress() Progress {
	if w.remote == nil {
		return Progress{}
	}
	return w.remote.Progress()
}
