package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// Resolve turns what a user gave as a model (strata node --model, strata
// generate --model) into a local file to open:
//
//   - an existing file's path is returned as is (a *.partial download is
//     refused: it is no model);
//   - a name the store at dir holds (as `strata model list` prints it, or
//     any spelling of its reference) is its first file's path;
//   - an hf:// or http(s):// reference the store lacks is pulled first,
//     with opts;
//   - anything else is an error that says to pull it.
//
// dir "" is DefaultDir.
func Resolve(ctx context.Context, model, dir string, opts ...Option) (string, error) {
	if model == "" {
		return "", fmt.Errorf("%w: empty model", ErrBadRef)
	}
	st, statErr := os.Stat(model)
	if statErr == nil {
		if strings.HasSuffix(model, ".partial") {
			return "", fmt.Errorf("%w: %s is an unfinished download, not a model: pull it again", ErrBadRef, model)
		}
		if st.IsDir() {
			return "", fmt.Errorf("%w: %s is a directory, not a model file", ErrBadRef, model)
		}
		return model, nil
	}
	if !errors.Is(statErr, fs.ErrNotExist) {
		return "", fmt.Errorf("store: %w", statErr)
	}
	ref, refErr := ParseRef(model)
	if refErr != nil {
		// Neither a file nor a reference: most likely a mistyped path.
		return "", fmt.Errorf("%w: %s is no file, and not a model reference (hf://OWNER/REPO[/FILE.gguf], OWNER/REPO:QUANT, https://…)", ErrNotFound, model)
	}
	if dir == "" {
		var err error
		if dir, err = DefaultDir(); err != nil {
			return "", err
		}
	}
	s, err := Open(dir)
	if err != nil {
		return "", err
	}
	e, err := s.Lookup(model)
	if err == nil {
		return s.Path(e)
	}
	if !errors.Is(err, ErrNotFound) {
		return "", err
	}
	// Only explicit addresses are downloaded on the fly: OWNER/REPO:QUANT
	// could be a mistyped path, and a pull may be many gigabytes.
	if ref.Kind == KindURL || strings.HasPrefix(strings.ToLower(model), "hf://") {
		p, err := NewPuller(s, opts...)
		if err != nil {
			return "", err
		}
		if e, err = p.PullRef(ctx, ref); err != nil {
			return "", err
		}
		return s.Path(e)
	}
	return "", fmt.Errorf("%w: %s is no file and not in the model store %s: run `strata model pull %s` first", ErrNotFound, model, dir, model)
}
