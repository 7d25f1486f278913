package weights

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/internal/goldentest"
)

// TestManifestRequestWire: the requests a real askManifest sends over a
// loopback control stream for a two-page manifest are the golden ones
// (manifest_pages.txt's manifest-request and page-request-1), which
// TestGoldenManifestPages holds the encoder to; a request for any model
// leaves the fingerprint out.
func TestManifestRequestWire(t *testing.T) {
	const fp = "sha256:golden-pages"
	big := bigChunkManifest(t, fp, manifestPage/sha256.Size+16)
	server, asker := pageHosts(t)
	w := &Server{manifest: big, fp: fp, swarm: noSwarm{}}
	var mu sync.Mutex
	var reqs [][]byte
	server.Streams().HandleControl(func(_ context.Context, _ peer.ID, req []byte) ([]byte, error) {
		mu.Lock()
		reqs = append(reqs, bytes.Clone(req))
		mu.Unlock()
		return w.AnswerManifest(req)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ask := range []string{fp, ""} {
		if a, err := askManifest(ctx, asker.Streams(), server.ID(), ask); err != nil || !bytes.Equal(a.data, big) {
			t.Fatalf("manifest for %q: %d bytes, %v", ask, len(a.data), err)
		}
	}
	g := goldentest.Read(t, "manifest_pages.txt")
	mu.Lock()
	defer mu.Unlock()
	p1 := g["page-request-1"]
	want := [][]byte{g["manifest-request"], p1, g["manifest-request"][:4], p1[:len(p1)-len(fp)]}
	if len(reqs) != len(want) || len(want[0]) <= 4 || len(p1) <= len(fp) {
		t.Fatalf("%d requests for two manifests of two pages, want 4", len(reqs))
	}
	for i, w := range want {
		if !bytes.Equal(reqs[i], w) {
			t.Errorf("request %d: %x, golden %x", i, reqs[i], w)
		}
	}
}

// TestManifestRequestRefused: a malformed manifest request is refused
// with ErrBadFrame, and askManifest sends no fingerprint the answerer
// would refuse.
func TestManifestRequestRefused(t *testing.T) {
	long := strings.Repeat("f", consensus.MaxFingerprintLen+1)
	for name, req := range map[string][]byte{
		"empty":                     nil,
		"short magic":               []byte("SMF"),
		"other magic":               []byte("SMI1"),
		"page without offset":       []byte(manifestPageMagic),
		"page offset truncated":     append([]byte(manifestPageMagic), 0x80),
		"page offset non-canonical": append([]byte(manifestPageMagic), 0x80, 0x00),
		"page offset oversize":      binary.AppendUvarint([]byte(manifestPageMagic), consensus.MaxManifestSize+1),
		"fingerprint too long":      []byte(manifestReqMagic + long),
		"page fingerprint too long": append(binary.AppendUvarint([]byte(manifestPageMagic), 5), long...),
	} {
		if _, _, _, err := decodeManifestRequest(req); !errors.Is(err, ErrBadFrame) {
			t.Errorf("%s (%x): %v, want ErrBadFrame", name, req, err)
		}
	}
	w := &Server{manifest: []byte("m"), fp: "fp", swarm: noSwarm{}}
	if _, err := w.AnswerManifest(append(binary.AppendUvarint([]byte(manifestPageMagic), consensus.MaxManifestSize+1), "fp"...)); !errors.Is(err, ErrBadFrame) {
		t.Errorf("answer to an oversize offset: %v", err)
	}
	if _, err := askManifest(context.Background(), nil, "", long); !errors.Is(err, ErrUnknownModel) {
		t.Errorf("ask with a fingerprint too long: %v", err)
	}
}

// FuzzManifestRequest: the manifest request's decoder takes any bytes
// without panicking, refuses with ErrBadFrame, and what it accepts is in
// bounds and encodes back to the same bytes.
func FuzzManifestRequest(f *testing.F) {
	f.Add(encodeManifestRequest("sha256:golden-pages", false, 0))
	f.Add(encodeManifestRequest("", true, manifestPage))
	f.Fuzz(func(t *testing.T, in []byte) {
		fp, page, off, err := decodeManifestRequest(in)
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if len(fp) > consensus.MaxFingerprintLen || off > consensus.MaxManifestSize || (!page && off != 0) {
			t.Fatalf("accepted fingerprint of %d bytes, page %v at %d", len(fp), page, off)
		}
		if out := encodeManifestRequest(fp, page, off); !bytes.Equal(out, in) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", in, out)
		}
	})
}
