package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Two names share a blob: removing one keeps it, removing both deletes it.
func TestRemoveKeepsSharedBlobs(t *testing.T) {
	h := newFakeHub(t)
	want := h.put("o/r", "m-q4_0.gguf", randomBytes(50, 20_000))
	s := testStore(t)
	p := testPuller(t, s, h)
	ctx := context.Background()
	a, err := p.Pull(ctx, "o/r:q4_0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Pull(ctx, "hf://o/r/m-q4_0.gguf")
	if err != nil {
		t.Fatal(err)
	}
	blob := s.blobPath(a.Parts[0].SHA256)
	if b.Parts[0].SHA256 != a.Parts[0].SHA256 {
		t.Fatal("the same file got two blobs")
	}
	// Any spelling of a reference finds its entry.
	if e, err := s.Lookup("hf://o/r:Q4_0"); err != nil || e.Name != a.Name {
		t.Fatalf("lookup by another spelling: %+v, %v", e, err)
	}
	if _, err := s.Remove(ctx, "O/R:q4_0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("remove of an unknown name: %v", err)
	}
	if _, err := s.Remove(ctx, "o/r:Q4_0"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(blob); err != nil {
		t.Fatalf("a blob another name uses was removed: %v", err)
	}
	if got := readModel(t, s, b); !bytes.Equal(got, want) {
		t.Fatal("the remaining name's file differs")
	}
	if _, err := s.Remove(ctx, b.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(blob); !os.IsNotExist(err) {
		t.Fatalf("the last name's blob stayed: %v", err)
	}
	if l, err := s.List(); err != nil || len(l) != 0 {
		t.Fatalf("list after removing all: %+v, %v", l, err)
	}
	if d, _ := os.ReadDir(filepath.Join(s.Dir(), filesDir)); len(d) != 0 {
		t.Errorf("links stayed: %v", d)
	}
}

func TestResolve(t *testing.T) {
	h := newFakeHub(t)
	want := h.put("o/r", "m-q4_0.gguf", randomBytes(51, 20_000))
	dir := testStore(t).Dir()
	ctx := context.Background()
	opts := []Option{WithEndpoint(h.hub.URL), WithToken("")}

	// A path is itself.
	file := filepath.Join(t.TempDir(), "local.gguf")
	if err := os.WriteFile(file, []byte("GGUF"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := Resolve(ctx, file, dir, opts...); err != nil || got != file {
		t.Fatalf("path: %q, %v", got, err)
	}
	// OWNER/REPO:QUANT is not pulled on the fly; the error says how.
	if _, err := Resolve(ctx, "o/r:q4_0", dir, opts...); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "strata model pull o/r:q4_0") {
		t.Fatalf("store name not held: %v", err)
	}
	if h.cdnGets.Load() != 0 {
		t.Fatal("resolving a name the store lacks downloaded it")
	}
	// hf:// is pulled, then found without the network.
	got, err := Resolve(ctx, "hf://o/r/m-q4_0.gguf", dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(got); err != nil || !bytes.Equal(b, want) {
		t.Fatalf("resolved %s: %v", got, err)
	}
	gets := h.cdnGets.Load()
	h.hub.Close()
	if again, err := Resolve(ctx, "hf://o/r/m-q4_0.gguf", dir, opts...); err != nil || again != got {
		t.Fatalf("second resolve: %q, %v", again, err)
	}
	if h.cdnGets.Load() != gets {
		t.Error("a held model was downloaded again")
	}
	// Mistyped paths and partial files are errors.
	if _, err := Resolve(ctx, filepath.Join(t.TempDir(), "nope.gguf"), dir); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing path: %v", err)
	}
	partial := filepath.Join(t.TempDir(), "sha256-ab.partial")
	os.WriteFile(partial, nil, 0o644) //nolint:errcheck
	if _, err := Resolve(ctx, partial, dir); !errors.Is(err, ErrBadRef) {
		t.Errorf("partial file: %v", err)
	}
}

func TestStoreCorruption(t *testing.T) {
	h := newFakeHub(t)
	h.put("o/r", "m-q4_0.gguf", randomBytes(52, 1000))
	s := testStore(t)
	e, err := testPuller(t, s, h).Pull(context.Background(), "o/r:q4_0")
	if err != nil {
		t.Fatal(err)
	}
	blob := s.blobPath(e.Parts[0].SHA256)
	if err := os.Truncate(blob, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Path(e); !errors.Is(err, ErrCorrupt) {
		t.Errorf("truncated blob: %v", err)
	}
	os.Remove(blob)
	if _, err := Resolve(context.Background(), "o/r:q4_0", s.Dir()); !errors.Is(err, ErrCorrupt) {
		t.Errorf("missing blob: %v", err)
	}
	if err := os.WriteFile(filepath.Join(s.Dir(), indexFile), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("bad index: %v", err)
	}
}
