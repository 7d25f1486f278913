package store

import "errors"

// Sentinel errors; every error the package returns wraps one of them (or a
// context error), with the file or name at fault in the message.
var (
	// ErrBadRef reports a model reference that does not parse.
	ErrBadRef = errors.New("store: bad model reference")
	// ErrNotFound reports a name the store does not hold, or a repository
	// or file the hub does not have.
	ErrNotFound = errors.New("store: not found")
	// ErrNoMatch reports a quant (or an empty choice) that picks no GGUF
	// file of the repository.
	ErrNoMatch = errors.New("store: no matching file")
	// ErrAmbiguous reports a choice that picks several models.
	ErrAmbiguous = errors.New("store: ambiguous reference")
	// ErrHashMismatch reports a download whose sha256 is not the one the
	// hub published; the partial file is removed.
	ErrHashMismatch = errors.New("store: sha256 mismatch")
	// ErrUnauthorized reports a 401 or 403 from the hub (set HF_TOKEN).
	ErrUnauthorized = errors.New("store: unauthorized")
	// ErrDownload reports a failed transfer (bad status, short body, a
	// server that answered another range than asked).
	ErrDownload = errors.New("store: download failed")
	// ErrNoSpace reports a disk without room for a download.
	ErrNoSpace = errors.New("store: not enough disk space")
	// ErrCorrupt reports an unreadable index or a blob that is missing or
	// has the wrong size.
	ErrCorrupt = errors.New("store: corrupt store")
)
