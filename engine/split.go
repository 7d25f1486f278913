package engine

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

// The keys llama-gguf-split writes into every part: the part's index
// (from 0), the number of parts, and the tensors of all parts together.
const (
	keySplitNo      = "split.no"
	keySplitCount   = "split.count"
	keySplitTensors = "split.tensors.count"
)

// splitName matches llama.cpp's part names, PREFIX-%05d-of-%05d.gguf.
var splitName = regexp.MustCompile(`^(.*)-([0-9]{5,})-of-([0-9]{5,})\.gguf$`)

// SplitPath is the name llama.cpp gives part i (from 0) of n of the model
// whose name without the suffix is prefix: prefix-0000{i+1}-of-0000{n}.gguf.
func SplitPath(prefix string, i, n int) string {
	return fmt.Sprintf("%s-%05d-of-%05d.gguf", prefix, i+1, n)
}

// SplitPaths returns the paths of all parts of the split model that path
// names one part of, and that part's index; ok is false when path does not
// follow the PREFIX-00001-of-0000N.gguf pattern.
func SplitPaths(path string) (paths []string, index int, ok bool) {
	m := splitName.FindStringSubmatch(filepath.Base(path))
	if m == nil {
		return nil, 0, false
	}
	i, err1 := strconv.Atoi(m[2])
	n, err2 := strconv.Atoi(m[3])
	if err1 != nil || err2 != nil || i < 1 || i > n || n > 1<<16 {
		return nil, 0, false
	}
	prefix := filepath.Join(filepath.Dir(path), m[1])
	for k := 0; k < n; k++ {
		paths = append(paths, SplitPath(prefix, k, n))
	}
	return paths, i - 1, true
}

// splitKeys reads a part's split keys; a file without them is part 0 of 1.
func splitKeys(f *File) (no, count, total int, err error) {
	if _, ok := f.Get(keySplitCount); !ok {
		return 0, 1, len(f.Tensors), nil
	}
	get := func(key string) (int, error) {
		v, err := f.Uint(key)
		if err != nil {
			return 0, err
		}
		if v > 1<<31 {
			return 0, fmt.Errorf("%w: key %q = %d is too large", ErrCorrupt, key, v)
		}
		return int(v), nil
	}
	if count, err = get(keySplitCount); err != nil {
		return
	}
	if no, err = get(keySplitNo); err != nil {
		return
	}
	if total, err = get(keySplitTensors); err != nil {
		return
	}
	if count == 0 || no >= count {
		err = fmt.Errorf("%w: %s %d of %s %d", ErrCorrupt, keySplitNo, no, keySplitCount, count)
	}
	return
}

// ReadSplit parses a model split into parts, parts[i] being the part with
// split.no i, of sizes[i] bytes. The result reads each tensor by offset
// from the part that holds it. A part that is missing, out of order or of
// another split is an ErrSplitPart naming it.
func ReadSplit(parts []io.ReaderAt, sizes []int64) (*File, error) {
	if len(parts) != len(sizes) || len(parts) == 0 {
		return nil, fmt.Errorf("%w: %d parts and %d sizes", ErrSplitPart, len(parts), len(sizes))
	}
	files := make([]*File, len(parts))
	for i := range parts {
		f, err := ReadFile(parts[i], sizes[i])
		if err != nil {
			return nil, fmt.Errorf("%w: part %d of %d: %w", ErrSplitPart, i+1, len(parts), err)
		}
		files[i] = f
	}
	return mergeParts(files, nil)
}

// mergeParts checks that files are the parts of one split model, in order,
// and joins them. names, when set, name the parts in errors.
func mergeParts(files []*File, names []string) (*File, error) {
	n := len(files)
	name := func(i int) string {
		if names != nil {
			return fmt.Sprintf("part %d of %d (%s)", i+1, n, names[i])
		}
		return fmt.Sprintf("part %d of %d", i+1, n)
	}
	_, _, total, err := splitKeys(files[0])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrSplitPart, name(0), err)
	}
	first := files[0]
	out := &File{Version: first.Version, KV: first.KV, Alignment: first.Alignment, DataOffset: first.DataOffset,
		kv: first.kv, tensors: make(map[string]int, total)}
	h := sha256.New()
	for i, f := range files {
		no, count, tot, err := splitKeys(f)
		switch {
		case err != nil:
			return nil, fmt.Errorf("%w: %s: %w", ErrSplitPart, name(i), err)
		case count != n:
			return nil, fmt.Errorf("%w: %s says the model has %d parts", ErrSplitPart, name(i), count)
		case no != i:
			return nil, fmt.Errorf("%w: %s is part %d (%s %d)", ErrSplitPart, name(i), no+1, keySplitNo, no)
		case tot != total:
			return nil, fmt.Errorf("%w: %s says the model has %d tensors, part 1 says %d", ErrSplitPart, name(i), tot, total)
		}
		for _, t := range f.Tensors {
			if j, dup := out.tensors[t.Name]; dup {
				return nil, fmt.Errorf("%w: %s repeats tensor %q of part %d", ErrSplitPart, name(i), t.Name, out.Tensors[j].Part+1)
			}
			t.Part = i
			out.tensors[t.Name] = len(out.Tensors)
			out.Tensors = append(out.Tensors, t)
		}
		p := f.Parts[0]
		if names != nil {
			p.Path = names[i]
		}
		out.Parts = append(out.Parts, p)
		out.readers = append(out.readers, f.readers[0])
		out.Size += f.Size
		h.Write(f.headerFP[:])
	}
	if len(out.Tensors) != total {
		return nil, fmt.Errorf("%w: the %d parts hold %d tensors, %s says %d", ErrSplitPart, n, len(out.Tensors), keySplitTensors, total)
	}
	copy(out.headerFP[:], h.Sum(nil))
	return out, nil
}

// OpenParts parses the model whose parts, in split.no order, are the files
// at paths, whatever their names (content-addressed blobs, say); one path
// is a single file. It keeps no file open: each part is reopened for each
// read. A part that is missing, out of order or of another split is an
// ErrSplitPart naming its path.
func OpenParts(paths []string) (*File, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: no parts", ErrSplitPart)
	}
	files := make([]*File, len(paths))
	for i, p := range paths {
		f, err := readPart(p)
		if err != nil {
			return nil, fmt.Errorf("%w: part %d of %d (%s): %w", ErrSplitPart, i+1, len(paths), p, err)
		}
		files[i] = f
	}
	if len(paths) == 1 {
		if _, count, _, err := splitKeys(files[0]); err != nil || count > 1 {
			return mergeParts(files, paths) // the error, naming the part
		}
		files[0].Parts[0].Path = paths[0]
		return files[0], nil
	}
	return mergeParts(files, paths)
}

// openSplit opens the other parts of the split model of which fh, at
// path, is part no of count (already parsed as f). It parses each part's
// header and keeps only its path: the parts are reopened for each read,
// so that the caller's closing fh is all there is to close.
func openSplit(path string, fh *os.File, f *File, no, count int) (*File, error) {
	paths, idx, ok := SplitPaths(path)
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: %s is part %d of %d, but its name does not follow PREFIX-%05d-of-%05d.gguf, so its siblings cannot be found",
			ErrSplitPart, path, no+1, count, no+1, count)
	case len(paths) != count || idx != no:
		return nil, fmt.Errorf("%w: %s is named part %d of %d, but its %s and %s say part %d of %d",
			ErrSplitPart, path, idx+1, len(paths), keySplitNo, keySplitCount, no+1, count)
	}
	files := make([]*File, count)
	for i, p := range paths {
		if i == no {
			files[i] = f
			continue
		}
		pf, err := readPart(p)
		if err != nil {
			return nil, fmt.Errorf("%w: part %d of %d (%s): %w", ErrSplitPart, i+1, count, p, err)
		}
		files[i] = pf
	}
	return mergeParts(files, paths)
}

// readPart parses the header of the file at path, which it then reopens
// for each read.
func readPart(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	f, err := ReadFile(fh, st.Size())
	if err != nil {
		return nil, err
	}
	f.readers[0] = &pathReader{path: path, size: st.Size()}
	return f, nil
}

// pathReader reads a file by path, opening it for each read.
type pathReader struct {
	path string
	size int64
}

func (r *pathReader) ReadAt(p []byte, off int64) (int, error) {
	fh, err := os.Open(r.path)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	if st, err := fh.Stat(); err != nil || st.Size() != r.size {
		return 0, fmt.Errorf("%w: %s changed size since it was opened", ErrSplitPart, r.path)
	}
	return fh.ReadAt(p, off)
}
