package engine

import "fmt"

// A slice is a GGUF file that holds only some layers of a model: the full
// file's metadata and tensor table entries for layers [lo, hi) (and the
// embedding or head where that range needs them), as engine/slicefile writes
// it from chunks fetched from peers. These keys mark it. A stage opened
// from a slice reports the full model's fingerprint, so that it joins the
// swarm of that model, and may only load a range inside the slice's.
const (
	// SliceKeyFingerprint is the full model file's Fingerprint (string).
	SliceKeyFingerprint = "strata.slice.fingerprint"
	// SliceKeyLo and SliceKeyHi are the slice's layer range (uint32).
	SliceKeyLo = "strata.slice.lo"
	SliceKeyHi = "strata.slice.hi"
)

// SliceRange reports whether f is a slice, and if so its layer range and
// the full model's fingerprint.
func (f *File) SliceRange() (lo, hi int, fingerprint string, ok bool, err error) {
	if _, present := f.Get(SliceKeyFingerprint); !present {
		return 0, 0, "", false, nil
	}
	fp, err := f.String(SliceKeyFingerprint)
	if err != nil {
		return 0, 0, "", false, err
	}
	l, err := f.Uint(SliceKeyLo)
	if err != nil {
		return 0, 0, "", false, err
	}
	h, err := f.Uint(SliceKeyHi)
	if err != nil {
		return 0, 0, "", false, err
	}
	if l >= h || h > 1<<16 || fp == "" {
		return 0, 0, "", false, fmt.Errorf("%w: slice range [%d, %d) of model %q", ErrCorrupt, l, h, fp)
	}
	return int(l), int(h), fp, true, nil
}
