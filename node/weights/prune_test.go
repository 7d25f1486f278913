package weights

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/swarm/chunks"
)

// TestPruneSlices: once a node serves a range, the slices of other ranges
// go, except one a fetch or load still uses; other files stay.
func TestPruneSlices(t *testing.T) {
	dir := t.TempDir()
	f := &Remote{man: testManifest(t), dir: dir, log: testLogger(t)}
	r := func(a, b int) layers.Range { return layers.Range{Start: a, End: b} }
	files := map[string]bool{ // path: kept
		f.SlicePath(r(0, 4)):                        true, // kept
		f.SlicePath(r(4, 8)):                        false,
		f.SlicePath(r(2, 6)) + chunks.PartSuffix:    false,
		f.SlicePath(r(4, 8)) + chunks.EdgesSuffix:   false,
		f.SlicePath(r(0, 4)) + chunks.EdgesSuffix:   true, // the kept slice's
		f.SlicePath(r(0, 2)):                        true, // in use
		f.SlicePath(r(0, 8)) + ".tmp123":            true, // being written
		fpFile(dir, f.man.Fingerprint, ".header"):   true,
		fpFile(dir, f.man.Fingerprint, ".manifest"): true,
	}
	for p := range files {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f.use(f.SlicePath(r(0, 2)), 1)
	f.Prune(r(0, 4))
	for p, kept := range files {
		_, err := os.Stat(p)
		if kept != (err == nil) {
			t.Errorf("%s: kept %v, want %v", filepath.Base(p), err == nil, kept)
		}
	}
	f.use(f.SlicePath(r(0, 2)), -1)
	f.Prune(r(0, 4))
	if _, err := os.Stat(f.SlicePath(r(0, 2))); err == nil {
		t.Error("a slice no longer in use was kept")
	}
}
