package chunks

import "errors"

var (
	// ErrManifest: a manifest does not decode, or does not describe a
	// consistent file.
	ErrManifest = errors.New("chunks: bad manifest")
	// ErrBadChunk: a peer sent a chunk whose hash is not the manifest's.
	ErrBadChunk = errors.New("chunks: chunk hash mismatch")
	// ErrStalled: a peer sent nothing for longer than the stall timeout.
	ErrStalled = errors.New("chunks: peer stalled")
	// ErrProtocol: a peer broke the chunk protocol (malformed or
	// oversized frame, unknown status).
	ErrProtocol = errors.New("chunks: protocol violation")
	// ErrUnavailable: a peer does not hold the model or the chunk, or is
	// too busy to serve it now.
	ErrUnavailable = errors.New("chunks: chunk unavailable from peer")
	// ErrNoHolders: chunks are left and no holder is left to fetch them
	// from.
	ErrNoHolders = errors.New("chunks: no holder left")
	// ErrRange: a layer range outside the model.
	ErrRange = errors.New("chunks: bad layer range")
	// ErrClosed: the server or fetcher is closed.
	ErrClosed = errors.New("chunks: closed")
	// ErrSlice: a slice file on disk is not the one asked for, or not one
	// of the manifest's model.
	ErrSlice = errors.New("chunks: slice file mismatch")
)
