package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Layout under the store's root:
//
//	blobs/sha256-HEX            a complete, verified file, named by its content
//	blobs/sha256-HEX.partial    a download in progress (never a model)
//	blobs/sha256-HEX.state      what of the .partial is written, to resume
//	blobs/*.lock                one pull at a time per file
//	files/NAME/FILE.gguf        links to the blobs under the files' own names,
//	                            so that a split model's parts sit side by side
//	index.json                  the name index
//	index.lock
const (
	blobsDir  = "blobs"
	filesDir  = "files"
	indexFile = "index.json"
	indexLock = "index.lock"
)

// Store is a content-addressed local model store.
type Store struct {
	root string
}

// Entry is one named model of the store.
type Entry struct {
	// Name is the canonical reference (see Ref.Name).
	Name string `json:"name"`
	// Source says where the files came from: hub repository and revision
	// or URL.
	Source string `json:"source"`
	// Parts are the model's files in order: one, or a split model's parts.
	Parts []Part `json:"parts"`
	// Verified is true when every part's sha256 matched the one the server
	// published; false when the server published none.
	Verified bool      `json:"verified"`
	Pulled   time.Time `json:"pulled"`
}

// Part is one file of a model.
type Part struct {
	File   string `json:"file"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// Size is the model's total size in bytes.
func (e Entry) Size() int64 {
	var n int64
	for _, p := range e.Parts {
		n += p.Size
	}
	return n
}

type index struct {
	Version int     `json:"version"`
	Models  []Entry `json:"models"`
	// Remote is the models a node joined by name without their file
	// (see Remote).
	Remote []Remote `json:"remote,omitempty"`
}

// DefaultDir is the store's directory: $STRATA_HOME/models, or
// strata/models under the user cache directory.
func DefaultDir() (string, error) {
	if h := os.Getenv("STRATA_HOME"); h != "" {
		return filepath.Join(h, "models"), nil
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("store: no STRATA_HOME and no user cache directory: %w", err)
	}
	return filepath.Join(c, "strata", "models"), nil
}

// Open opens (creating it if needed) the store at dir.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: empty store directory", ErrCorrupt)
	}
	for _, d := range []string{dir, filepath.Join(dir, blobsDir), filepath.Join(dir, filesDir)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
	}
	return &Store{root: dir}, nil
}

// Dir is the store's root directory.
func (s *Store) Dir() string { return s.root }

var hexRe = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (s *Store) blobPath(sha string) string {
	return filepath.Join(s.root, blobsDir, "sha256-"+sha)
}

// entryDir is where an entry's links live: the name, escaped so that
// distinct names give distinct directories and none climbs out.
func (s *Store) entryDir(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			b.WriteByte(c)
		case c == '.' && i > 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return filepath.Join(s.root, filesDir, b.String())
}

// lockIndex takes the index lock for a read-modify-write.
func (s *Store) lockIndex(ctx context.Context) (*fileLock, error) {
	return lockFile(ctx, filepath.Join(s.root, indexLock))
}

func (s *Store) readIndex() (index, error) {
	b, err := os.ReadFile(filepath.Join(s.root, indexFile))
	if errors.Is(err, fs.ErrNotExist) {
		return index{Version: 1}, nil
	}
	if err != nil {
		return index{}, fmt.Errorf("store: %w", err)
	}
	var ix index
	if err := json.Unmarshal(b, &ix); err != nil {
		return index{}, fmt.Errorf("%w: %s: %v", ErrCorrupt, indexFile, err)
	}
	if ix.Version != 1 {
		return index{}, fmt.Errorf("%w: %s: version %d (want 1)", ErrCorrupt, indexFile, ix.Version)
	}
	return ix, nil
}

// writeIndex replaces the index atomically (write, sync, rename).
func (s *Store) writeIndex(ix index) error {
	slices.SortFunc(ix.Models, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	b, err := json.MarshalIndent(ix, "", "  ")
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return writeFileAtomic(filepath.Join(s.root, indexFile), append(b, '\n'))
}

func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// List returns the store's models, sorted by name.
func (s *Store) List() ([]Entry, error) {
	ix, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ix.Models, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return ix.Models, nil
}

// Lookup finds a model by its name, or by any spelling of a reference
// whose canonical name it holds (Qwen/X:Q4_K_M finds Qwen/X:q4_k_m).
func (s *Store) Lookup(name string) (Entry, error) {
	ix, err := s.readIndex()
	if err != nil {
		return Entry{}, err
	}
	keys := []string{name}
	if r, err := ParseRef(name); err == nil && r.Name() != name {
		keys = append(keys, r.Name())
	}
	for _, k := range keys {
		for _, e := range ix.Models {
			if e.Name == k {
				return e, nil
			}
		}
	}
	return Entry{}, fmt.Errorf("%w: no model %q in %s", ErrNotFound, name, s.root)
}

// Path is the local path of the entry's first file, the one to open; a
// split model's other parts sit beside it under their own names. It
// checks that every blob is present with its size and restores a missing
// link.
func (s *Store) Path(e Entry) (string, error) {
	if len(e.Parts) == 0 {
		return "", fmt.Errorf("%w: model %q has no files", ErrCorrupt, e.Name)
	}
	var first string
	for i, p := range e.Parts {
		if !hexRe.MatchString(p.SHA256) || checkFile(p.File) != nil {
			return "", fmt.Errorf("%w: model %q: bad part %q", ErrCorrupt, e.Name, p.File)
		}
		blob := s.blobPath(p.SHA256)
		st, err := os.Stat(blob)
		if err != nil {
			return "", fmt.Errorf("%w: model %q: %s: %v (pull it again)", ErrCorrupt, e.Name, p.File, err)
		}
		if st.Size() != p.Size {
			return "", fmt.Errorf("%w: model %q: %s is %d bytes, want %d (pull it again)", ErrCorrupt, e.Name, p.File, st.Size(), p.Size)
		}
		link, err := s.link(e.Name, p)
		if err != nil {
			return "", err
		}
		if i == 0 {
			first = link
		}
	}
	return first, nil
}

// link makes files/NAME/FILE point at the part's blob (a symbolic link, or
// a hard link where symbolic ones are not allowed) and returns its path.
func (s *Store) link(name string, p Part) (string, error) {
	link := filepath.Join(s.entryDir(name), filepath.FromSlash(p.File))
	blob := s.blobPath(p.SHA256)
	if st, err := os.Stat(link); err == nil {
		if bst, err := os.Stat(blob); err == nil && os.SameFile(st, bst) {
			return link, nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return "", fmt.Errorf("store: %w", err)
	}
	os.Remove(link)
	rel, err := filepath.Rel(filepath.Dir(link), blob)
	if err != nil {
		rel = blob
	}
	if err := os.Symlink(rel, link); err != nil {
		if lerr := os.Link(blob, link); lerr != nil {
			return "", fmt.Errorf("store: link %s: %w", link, err)
		}
	}
	return link, nil
}

// add records an entry (replacing one of the same name) and makes its
// links. The caller holds the parts' blob locks, so that a concurrent
// Remove does not delete a blob about to be named.
func (s *Store) add(ctx context.Context, e Entry) error {
	l, err := s.lockIndex(ctx)
	if err != nil {
		return err
	}
	defer l.unlock()
	ix, err := s.readIndex()
	if err != nil {
		return err
	}
	ix.Models = slices.DeleteFunc(ix.Models, func(o Entry) bool { return o.Name == e.Name })
	ix.Models = append(ix.Models, e)
	// Links first: an index entry whose path cannot be made is no model.
	os.RemoveAll(s.entryDir(e.Name))
	if _, err := s.Path(e); err != nil {
		return err
	}
	return s.writeIndex(ix)
}

// Remove deletes a model's name and links, and the blobs no other name
// uses (a blob a pull is writing or naming right now is left in place).
func (s *Store) Remove(ctx context.Context, name string) (Entry, error) {
	l, err := s.lockIndex(ctx)
	if err != nil {
		return Entry{}, err
	}
	defer l.unlock()
	e, err := s.Lookup(name)
	if err != nil {
		return Entry{}, err
	}
	ix, err := s.readIndex()
	if err != nil {
		return Entry{}, err
	}
	ix.Models = slices.DeleteFunc(ix.Models, func(o Entry) bool { return o.Name == e.Name })
	if err := s.writeIndex(ix); err != nil {
		return Entry{}, err
	}
	if err := os.RemoveAll(s.entryDir(e.Name)); err != nil {
		return e, fmt.Errorf("store: %w", err)
	}
	used := map[string]bool{}
	for _, o := range ix.Models {
		for _, p := range o.Parts {
			used[p.SHA256] = true
		}
	}
	for _, p := range e.Parts {
		if used[p.SHA256] || !hexRe.MatchString(p.SHA256) {
			continue
		}
		bl, ok, err := tryLockFile(s.blobPath(p.SHA256) + ".lock")
		if err != nil || !ok {
			continue
		}
		if err := os.Remove(s.blobPath(p.SHA256)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			bl.unlock()
			return e, fmt.Errorf("store: %w", err)
		}
		bl.unlock()
	}
	return e, nil
}
