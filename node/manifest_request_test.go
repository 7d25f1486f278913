package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
)

// readGoldenLines is testdata/golden/name's "name hex" lines by name,
// read only (checkGoldenFile writes the files).
func readGoldenLines(t *testing.T, name string) map[string][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "golden", name))
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string][]byte{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, h, ok := strings.Cut(line, " ")
		v, err := hex.DecodeString(h)
		if !ok || err != nil {
			t.Fatalf("%s: bad line %q", name, line)
		}
		lines[k] = v
	}
	return lines
}

// TestManifestRequestWire: the requests a real askManifest sends over a
// loopback control stream for a two-page manifest are the golden ones
// (manifest_pages.txt's manifest-request and page-request-1), which
// TestGoldenManifestPages holds the encoder to; a request for any model
// leaves the fingerprint out.
func TestManifestRequestWire(t *testing.T) {
	const fp = "sha256:golden-pages"
	big := bigChunkManifest(t, fp, manifestPage/sha256.Size+16)
	server, asker := pageHosts(t)
	w := &weights{model: &model{manifest: big, info: ModelInfo{Fingerprint: fp}}, cons: new(atomic.Pointer[consensus.Consensus])}
	var mu sync.Mutex
	var reqs [][]byte
	server.Streams().HandleControl(func(_ context.Context, _ peer.ID, req []byte) ([]byte, error) {
		mu.Lock()
		reqs = append(reqs, bytes.Clone(req))
		mu.Unlock()
		return w.answerManifest(req)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ask := range []string{fp, ""} {
		if a, err := askManifest(ctx, asker, server.ID(), ask); err != nil || !bytes.Equal(a.data, big) {
			t.Fatalf("manifest for %q: %d bytes, %v", ask, len(a.data), err)
		}
	}
	g := readGoldenLines(t, "manifest_pages.txt")
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
