package chunks

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/stratanet/strata/internal/codec"
	"github.com/stratanet/strata/internal/proto"
	"github.com/stratanet/strata/swarm"
)

// Protocol is the chunk transfer protocol. A stream carries requests and
// responses in turn: the client writes a request frame (swarm's framing: a
// 4-byte big-endian length and the payload: the model's fingerprint as a
// u8 length and bytes, and the chunk index as a uvarint), and the server
// answers with a status byte and, for StatusOK, the chunk as one frame.
// The client closes its side when it has no more requests.
const Protocol = proto.Chunk

// Network is what the chunk protocol needs of the swarm (a
// *swarm.Host): its protocol table and its streams.
type Network interface {
	ID() peer.ID
	Handle(p protocol.ID, fn swarm.StreamHandler) error
	Open(ctx context.Context, p peer.ID, proto protocol.ID) (*swarm.Stream, error)
}

// ServiceName is the resource manager service that chunk streams are
// accounted to.
const ServiceName = "strata.chunks"

// maxRequest bounds a request frame: a fingerprint and an index.
const maxRequest = 1 + maxFingerprint + binary.MaxVarintLen64

// Response status bytes.
const (
	statusOK      byte = 0
	statusUnknown byte = 1 // model not held
	statusNoChunk byte = 2 // index out of range
	statusBusy    byte = 3 // too many streams or no memory: try later
	statusFailed  byte = 4 // the server could not read its file
)

func statusText(s byte) string {
	switch s {
	case statusUnknown:
		return "model not held"
	case statusNoChunk:
		return "no such chunk"
	case statusBusy:
		return "busy"
	case statusFailed:
		return "server failed to read the chunk"
	}
	return fmt.Sprintf("status %d", s)
}

// encodeRequest is one framed request (decodeRequest's mirror, through
// internal/codec); a fingerprint out of bounds yields an empty request,
// which the server refuses (manifests are validated before any fetch).
func encodeRequest(fingerprint string, index int) []byte {
	w := codec.NewWriter(make([]byte, 0, maxRequest), binary.LittleEndian, ErrProtocol)
	w.Bytes8("fingerprint", []byte(fingerprint), maxFingerprint, false)
	w.Uvarint(uint64(index))
	var b bytes.Buffer
	_ = swarm.WriteFrame(&b, w.Bytes(), maxRequest)
	return b.Bytes()
}

func decodeRequest(p []byte) (string, int, error) {
	r := codec.NewReader(p, binary.LittleEndian, ErrProtocol)
	n := r.U8("fingerprint length")
	if r.Err() == nil && (n == 0 || int(n) > maxFingerprint) {
		r.Fail("fingerprint of %d bytes", n)
	}
	fp := string(r.Take(int(n), "fingerprint"))
	idx := r.Uvarint("chunk index", 1<<31)
	r.End()
	return fp, int(idx), r.Err()
}

// readRequest reads one request frame (swarm's framing); io.EOF is a
// clean end between requests.
func readRequest(rd io.Reader) (string, int, error) {
	p, err := swarm.ReadFrame(rd, maxRequest)
	if err == io.EOF {
		return "", 0, io.EOF
	}
	if err != nil {
		return "", 0, fmt.Errorf("%w: request: %w", ErrProtocol, err)
	}
	return decodeRequest(p)
}
