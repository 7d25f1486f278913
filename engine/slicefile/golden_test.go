package slicefile

import (
	"bytes"
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/swarm/chunks"
	"github.com/stratanet/strata/swarm/chunks/chunkstest"
)

// updateGolden rewrites the golden files from what the code makes now:
// only for a deliberate change of format, never to make a test pass.
var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden from the current code")

// stories is a real GGUF file nobody here wrote (testdata/models/README.md).
const stories = "../../testdata/models/stories260K.gguf"

// checkGolden compares got with the golden file name.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *updateGolden {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes differ from the golden %d bytes", name, len(got), len(want))
	}
}

// The manifest of a real model file, its ID, and the slices and edges
// files fetched from it are the bytes they were: a refactoring that
// changes them changes what peers exchange and what nodes hold on disk.
func TestGoldenStories(t *testing.T) {
	m, err := BuildManifest(stories, chunks.WithChunkSize(chunks.MinChunkSize))
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "stories260K-65536.manifest", b)

	a := holder(t, m, stories, nil)
	me := chunkstest.NewHost(t)
	chunkstest.Connect(t, me, a)
	f := chunks.NewFetcher(me.Streams(), m)
	dir := t.TempDir()
	var sums strings.Builder
	for _, r := range [][2]int{{0, 2}, {2, 4}, {4, 5}, {0, 5}} {
		out := filepath.Join(dir, fmt.Sprintf("s-%d-%d.gguf", r[0], r[1]))
		if _, err := FetchSlice(context.Background(), f, r[0], r[1], []peer.ID{a.ID()}, out); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{out, out + chunks.EdgesSuffix} {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&sums, "%x  %s\n", sha256.Sum256(data), filepath.Base(p))
		}
	}
	checkGolden(t, "stories260K-65536.slices.sha256", []byte(sums.String()))
}
