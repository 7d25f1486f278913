package swarm

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/crypto"
)

// IdentityFile is the name of the identity key in the data dir.
const IdentityFile = "identity.key"

// LoadOrCreateIdentity returns the Ed25519 key kept in dir, creating dir
// and the key (mode 0600) on first use. An existing key that does not
// parse is an error, never silently replaced: the peer ID is the node's
// name in the swarm.
func LoadOrCreateIdentity(dir string) (crypto.PrivKey, error) {
	path := filepath.Join(dir, IdentityFile)
	raw, err := os.ReadFile(path)
	if err == nil {
		sk, err := crypto.UnmarshalPrivateKey(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %w", path, ErrIdentity, err)
		}
		if sk.Type() != crypto.Ed25519 {
			return nil, fmt.Errorf("%s: key type %v, want Ed25519: %w", path, sk.Type(), ErrIdentity)
		}
		return sk, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read identity: %w: %w", ErrIdentity, err)
	}
	sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate identity: %w", err)
	}
	raw, err = crypto.MarshalPrivateKey(sk)
	if err != nil {
		return nil, fmt.Errorf("marshal identity: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if err := writeFileAtomic(path, raw, 0o600); err != nil {
		return nil, fmt.Errorf("write identity: %w", err)
	}
	return sk, nil
}

// writeFileAtomic writes data to a temporary file beside path and renames
// it into place, so that a crash leaves either no file or a whole one.
// It fails if path exists.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s: %w", path, fs.ErrExist)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	// Link instead of rename so that a file created meanwhile is not
	// overwritten.
	return os.Link(tmp, path)
}
