package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Remote is a model a node joined by name without holding its file
// (strata node --model NAME): the node learned the model's fingerprint
// from its swarm and fetches the layers it is placed on from peers into
// GGUF slices in its data dir. The store keeps the name's fingerprint so
// that a later join by the same name checks that the swarm still serves
// the same model, and `strata model list` shows where the slices are.
type Remote struct {
	// Name is the canonical reference (see Ref.Name).
	Name string `json:"name"`
	// Fingerprint is the model's (engine.File.Fingerprint).
	Fingerprint string `json:"fingerprint"`
	// Dir is the node data dir whose models/ folder holds the slices.
	Dir    string    `json:"dir"`
	Joined time.Time `json:"joined"`
}

func canonical(name string) string {
	if r, err := ParseRef(name); err == nil {
		return r.Name()
	}
	return name
}

// LookupRemote finds the remote model of that name (any spelling of the
// reference); ErrNotFound if none.
func (s *Store) LookupRemote(name string) (Remote, error) {
	ix, err := s.readIndex()
	if err != nil {
		return Remote{}, err
	}
	k := canonical(name)
	for _, r := range ix.Remote {
		if r.Name == k {
			return r, nil
		}
	}
	return Remote{}, fmt.Errorf("%w: no remote model %q in %s", ErrNotFound, name, s.root)
}

// ListRemote returns the remote models, sorted by name.
func (s *Store) ListRemote() ([]Remote, error) {
	ix, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ix.Remote, func(a, b Remote) int { return strings.Compare(a.Name, b.Name) })
	return ix.Remote, nil
}

// NoteRemote records (or replaces) a remote model. Its name must be a
// reference (ErrBadRef otherwise) and it needs a fingerprint.
func (s *Store) NoteRemote(ctx context.Context, r Remote) error {
	ref, err := ParseRef(r.Name)
	if err != nil {
		return err
	}
	if r.Fingerprint == "" {
		return fmt.Errorf("%w: remote model %s without a fingerprint", ErrBadRef, r.Name)
	}
	r.Name = ref.Name()
	if r.Joined.IsZero() {
		r.Joined = time.Now().UTC()
	}
	l, err := s.lockIndex(ctx)
	if err != nil {
		return err
	}
	defer l.unlock()
	ix, err := s.readIndex()
	if err != nil {
		return err
	}
	ix.Remote = slices.DeleteFunc(ix.Remote, func(o Remote) bool { return o.Name == r.Name })
	ix.Remote = append(ix.Remote, r)
	slices.SortFunc(ix.Remote, func(a, b Remote) int { return strings.Compare(a.Name, b.Name) })
	return s.writeIndex(ix)
}

// ForgetRemote drops the remote model of that name (its slices, in the
// node's data dir, are the node's to remove); ErrNotFound if none.
func (s *Store) ForgetRemote(ctx context.Context, name string) (Remote, error) {
	l, err := s.lockIndex(ctx)
	if err != nil {
		return Remote{}, err
	}
	defer l.unlock()
	r, err := s.LookupRemote(name)
	if err != nil {
		return Remote{}, err
	}
	ix, err := s.readIndex()
	if err != nil {
		return Remote{}, err
	}
	ix.Remote = slices.DeleteFunc(ix.Remote, func(o Remote) bool { return o.Name == r.Name })
	return r, s.writeIndex(ix)
}
