package weights

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/engine/slicefile"
	"github.com/stratanet/strata/swarm/chunks"
)

// The model's files in a node's data dir: the manifest of the file it
// holds (cached), and what a fetching node keeps (the manifest, the
// header, the slices).

// fpFile names a file of the model in a directory.
func fpFile(dir, fp, suffix string) string {
	short := fp
	if len(short) > 16 {
		short = short[:16]
	}
	return filepath.Join(dir, short+suffix)
}

// writeAtomic writes a file through a temporary one renamed into place.
func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// FileManifest is the manifest of the model file at path (fingerprint
// fp) in chunks of chunkSize, read from the cache under dir when it is
// there for the same file, else built (one read of the whole file) and
// cached. It returns the manifest encoded too, as the swarm's state holds
// it.
func FileManifest(path, fp, dir string, chunkSize int64, log *zap.Logger) (*chunks.Manifest, []byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	cache := ""
	if dir != "" {
		cache = fpFile(filepath.Join(dir, "models"), fp, fmt.Sprintf("-%d.manifest", chunkSize))
		if b, err := os.ReadFile(cache); err == nil {
			if m, err := decodeManifest(b, fp); err == nil && m.FileSize == st.Size() && m.ChunkSize == chunkSize {
				return m, b, nil
			}
			log.Warn("manifest cache does not match the file; building it again", zap.String("file", cache))
		}
	}
	start := time.Now()
	m, err := slicefile.BuildManifest(path, chunks.WithChunkSize(chunkSize))
	if err != nil {
		return nil, nil, err
	}
	if m.Fingerprint != fp {
		return nil, nil, fmt.Errorf("%w: %s changed while it was read", ErrConfig, path)
	}
	b, err := m.MarshalBinary()
	if err != nil {
		return nil, nil, err
	}
	log.Info("manifest built", zap.String("file", path), zap.Int("chunks", m.NumChunks()),
		zap.Int("bytes", len(b)), zap.Duration("took", time.Since(start).Round(time.Millisecond)))
	if len(b) > consensus.MaxManifestSize {
		return nil, nil, fmt.Errorf("%w: the manifest of %s is %d bytes, above %d: use larger chunks", ErrConfig, path, len(b), consensus.MaxManifestSize)
	}
	if cache != "" {
		if err := writeAtomic(cache, b); err != nil {
			log.Warn("manifest cache not written", zap.Error(err))
		}
	}
	return m, b, nil
}

// SliceFile is a slice of a model that a node fetched, in its data dir.
type SliceFile struct {
	Lo, Hi int // layers [Lo, Hi)
	Path   string
	Size   int64
}

// Slices lists the finished slices of model fp under a node's data dir
// (where a node that joined without the file keeps what it fetched).
func Slices(dataDir, fp string) ([]SliceFile, error) {
	dir := filepath.Join(dataDir, "models")
	matches, err := filepath.Glob(fpFile(dir, fp, "-*-*.gguf"))
	if err != nil {
		return nil, err
	}
	prefix := filepath.Base(fpFile(dir, fp, ""))
	var out []SliceFile
	for _, p := range matches {
		var s SliceFile
		rest := strings.TrimPrefix(filepath.Base(p), prefix)
		if n, err := fmt.Sscanf(rest, "-%d-%d.gguf", &s.Lo, &s.Hi); err != nil || n != 2 || fmt.Sprintf("-%d-%d.gguf", s.Lo, s.Hi) != rest {
			continue
		}
		st, err := os.Stat(p)
		if err != nil {
			continue
		}
		s.Path, s.Size = p, st.Size()
		out = append(out, s)
	}
	return out, nil
}
