// Package slicefile is the engine's side of moving weights between
// peers: it reads a GGUF model file's header into the layout that a
// swarm/chunks Manifest carries (BuildManifest), writes the GGUF slice of
// a layer range from chunks that package fetched and verified
// (FetchSlice), checks a slice on disk (CheckSlice), and finds a slice's
// tensors so that chunks can serve and reuse its chunks (OpenSlice,
// ReuseSlices).
//
// It is its own package, not part of engine (which knows nothing of peers)
// nor of engine/store (a content-addressed file store and downloader that
// imports neither engine nor the network). swarm/chunks moves bytes and
// knows no model format; every GGUF read or write on that path is here.
// It must not import node.
package slicefile
