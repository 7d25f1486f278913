package weights

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/swarm"
	"github.com/stratanet/strata/swarm/chunks"
)

// bigChunkManifest is the encoding of a chunk manifest of n chunks of the
// smallest size, with no file behind it.
func bigChunkManifest(t *testing.T, fp string, n int) []byte {
	t.Helper()
	m := chunks.Manifest{Fingerprint: fp, FileSize: int64(n) * chunks.MinChunkSize, DataOffset: 4096,
		ChunkSize: chunks.MinChunkSize, Layers: 2}
	per := (m.FileSize - m.DataOffset) / 2
	for i := range 2 {
		m.Tensors = append(m.Tensors, chunks.Tensor{Name: fmt.Sprintf("blk.%d.ffn_up.weight", i), Type: 0,
			Dims: []uint64{uint64(per / 4)}, Offset: m.DataOffset + int64(i)*per, Size: per})
	}
	for i := range n {
		m.Hashes = append(m.Hashes, sha256.Sum256(binary.AppendUvarint(nil, uint64(i))))
	}
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func pageHosts(t *testing.T) (server, asker *swarm.Host) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var hs [2]*swarm.Host
	for i := range hs {
		h, err := swarm.New(ctx, swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"), swarm.WithDiscovery(false))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		hs[i] = h
	}
	if err := hs[1].Connect(ctx, hs[0].AddrInfo()); err != nil {
		t.Fatal(err)
	}
	return hs[0], hs[1]
}

// A manifest larger than a control frame (a swarm whose manifest went to
// consensus in parts) reaches a joiner page by page; a small one still
// goes in one answer of the old form.
func TestManifestPages(t *testing.T) {
	const fp = "sha256:paged-model"
	big := bigChunkManifest(t, fp, 150_000)
	if len(big) <= swarm.DefaultMaxCtlFrame || len(big) > consensus.MaxManifestSize {
		t.Fatalf("test manifest of %d bytes: want one above a control frame (%d)", len(big), swarm.DefaultMaxCtlFrame)
	}
	server, asker := pageHosts(t)
	w := &Server{manifest: big, fp: fp, swarm: noSwarm{}}
	var calls atomic.Int32
	server.Streams().HandleControl(func(_ context.Context, _ peer.ID, req []byte) ([]byte, error) {
		calls.Add(1)
		return w.AnswerManifest(req)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := askManifest(ctx, asker.Streams(), server.ID(), fp)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.data, big) {
		t.Fatalf("paged manifest: %d bytes, want %d", len(a.data), len(big))
	}
	if want := (len(big) + manifestPage - 1) / manifestPage; int(calls.Load()) != want {
		t.Fatalf("%d calls for a %d-byte manifest, want %d", calls.Load(), len(big), want)
	}
	if m, err := decodeManifest(a.data, fp); err != nil || m.NumChunks() != 150_000 {
		t.Fatalf("decoded: %v", err)
	}
	// Any model (SwarmModel's question) is answered in pages too.
	if a, err := askManifest(ctx, asker.Streams(), server.ID(), ""); err != nil || !bytes.Equal(a.data, big) {
		t.Fatalf("paged manifest of any model: %v", err)
	}

	small := []byte("a small manifest")
	w.manifest = small
	resp, err := asker.Streams().Call(ctx, server.ID(), []byte(manifestReqMagic+fp))
	if err != nil || resp[0]&manifestPaged != 0 || !bytes.Equal(resp[1:], small) {
		t.Fatalf("small manifest answer %q, %v", resp, err)
	}
	// A page past the end is refused.
	w.manifest = big
	req := binary.AppendUvarint([]byte(manifestPageMagic), uint64(len(big)))
	if _, err := asker.Streams().Call(ctx, server.ID(), append(req, fp...)); err == nil {
		t.Fatal("a page past the end answered")
	}
}

// A peer whose pages do not add up is refused with ErrBadFrame: a length
// that changes between pages, pages past the end, a length no manifest
// may have, an answer without bytes.
func TestManifestPagesRefused(t *testing.T) {
	server, asker := pageHosts(t)
	paged := func(total uint64, page int) []byte {
		b := binary.AppendUvarint([]byte{manifestPaged}, total)
		return append(b, make([]byte, page)...)
	}
	cases := map[string]func(req []byte) []byte{
		"length changes": func(req []byte) []byte {
			if hasMagic(req, manifestPageMagic) {
				return paged(3*manifestPage, 10)
			}
			return paged(2*manifestPage, manifestPage)
		},
		"past the end":   func([]byte) []byte { return paged(manifestPage+1, manifestPage+2) },
		"too large":      func([]byte) []byte { return paged(consensus.MaxManifestSize+1, manifestPage) },
		"small in pages": func([]byte) []byte { return paged(10, 10) },
		"no bytes":       func([]byte) []byte { return paged(2*manifestPage, 0) },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for name, answer := range cases {
		server.Streams().HandleControl(func(_ context.Context, _ peer.ID, req []byte) ([]byte, error) { return answer(req), nil })
		if _, err := askManifest(ctx, asker.Streams(), server.ID(), "fp"); !errors.Is(err, ErrBadFrame) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
