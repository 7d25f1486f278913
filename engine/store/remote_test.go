package store

import (
	"context"
	"errors"
	"testing"
)

// A remote model is found by any spelling of its reference, replaced by
// a later note, listed apart from the models held, and forgotten.
func TestRemote(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.NoteRemote(ctx, Remote{Name: "not a ref at all", Fingerprint: "f"}); !errors.Is(err, ErrBadRef) {
		t.Fatalf("bad name: %v", err)
	}
	if err := s.NoteRemote(ctx, Remote{Name: "Qwen/X-GGUF:q4_k_m"}); !errors.Is(err, ErrBadRef) {
		t.Fatalf("no fingerprint: %v", err)
	}
	if err := s.NoteRemote(ctx, Remote{Name: "Qwen/X-GGUF:Q4_K_M", Fingerprint: "aaa", Dir: "/d1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.NoteRemote(ctx, Remote{Name: "Qwen/X-GGUF:q4_k_m", Fingerprint: "bbb", Dir: "/d2"}); err != nil {
		t.Fatal(err)
	}
	r, err := s.LookupRemote("Qwen/X-GGUF:Q4_K_M")
	if err != nil || r.Fingerprint != "bbb" || r.Dir != "/d2" {
		t.Fatalf("lookup: %+v, %v", r, err)
	}
	if l, err := s.ListRemote(); err != nil || len(l) != 1 {
		t.Fatalf("list: %+v, %v", l, err)
	}
	if l, err := s.List(); err != nil || len(l) != 0 {
		t.Fatalf("models held: %+v, %v", l, err)
	}
	if _, err := s.Lookup("Qwen/X-GGUF:q4_k_m"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a remote model is no model held: %v", err)
	}
	if _, err := s.ForgetRemote(ctx, "Qwen/X-GGUF:q4_k_m"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LookupRemote("Qwen/X-GGUF:q4_k_m"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after forget: %v", err)
	}
	if _, err := s.ForgetRemote(ctx, "Qwen/X-GGUF:q4_k_m"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("forget twice: %v", err)
	}
}
