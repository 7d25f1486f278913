package swarm

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/libp2p/go-libp2p/core/pnet"
)

// A swarm key file is go-libp2p's (and IPFS's) version-1 pre-shared key
// format:
//
//	/key/swarm/psk/1.0.0/
//	/base16/
//	<64 hex digits>

// GenerateSwarmKey returns a new random 256-bit pre-shared key.
func GenerateSwarmKey() (pnet.PSK, error) {
	k := make([]byte, 32)
	if _, err := io.ReadFull(rand.Reader, k); err != nil {
		return nil, fmt.Errorf("generate swarm key: %w", err)
	}
	return pnet.PSK(k), nil
}

// EncodeSwarmKey returns the key file's contents for psk.
func EncodeSwarmKey(psk pnet.PSK) []byte {
	var b bytes.Buffer
	b.WriteString("/key/swarm/psk/1.0.0/\n/base16/\n")
	b.WriteString(hex.EncodeToString(psk))
	b.WriteByte('\n')
	return b.Bytes()
}

// WriteSwarmKeyFile writes psk to path with mode 0600. It refuses to
// overwrite an existing file: replacing a key cuts a node off its swarm.
func WriteSwarmKeyFile(path string, psk pnet.PSK) error {
	if err := writeFileAtomic(path, EncodeSwarmKey(psk), 0o600); err != nil {
		return fmt.Errorf("write swarm key: %w", err)
	}
	return nil
}

// DecodeSwarmKey parses a key file's contents.
func DecodeSwarmKey(r io.Reader) (pnet.PSK, error) {
	psk, err := pnet.DecodeV1PSK(io.LimitReader(r, 4096))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSwarmKey, err)
	}
	if len(psk) != 32 {
		return nil, fmt.Errorf("key of %d bytes (want 32): %w", len(psk), ErrSwarmKey)
	}
	return psk, nil
}

// LoadSwarmKey reads a swarm key file.
func LoadSwarmKey(path string) (pnet.PSK, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSwarmKey, err)
	}
	defer f.Close()
	psk, err := DecodeSwarmKey(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return psk, nil
}
