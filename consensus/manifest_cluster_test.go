package consensus

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stratanet/strata/swarm/chunks"
)

// syntheticManifest is the encoded chunk manifest of a file of n chunks
// of the smallest size: no file behind it, a hash per chunk that differs
// from its neighbours'.
func syntheticManifest(t testing.TB, n int) []byte {
	t.Helper()
	const layers = 4
	m := chunks.Manifest{Fingerprint: testFingerprint, FileSize: int64(n) * chunks.MinChunkSize, DataOffset: 4096,
		ChunkSize: chunks.MinChunkSize, Layers: layers}
	per := (m.FileSize - m.DataOffset) / layers
	for i := range layers {
		m.Tensors = append(m.Tensors, chunks.Tensor{Name: fmt.Sprintf("blk.%d.ffn_up.weight", i), Type: 0,
			Dims: []uint64{uint64(per / 4)}, Offset: m.DataOffset + int64(i)*per, Size: per})
	}
	for i := range n {
		m.Hashes = append(m.Hashes, sha256.Sum256(binary.AppendUvarint(nil, uint64(i))))
	}
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestClusterManifestInParts: a founder whose manifest is larger than a
// record (80,000 chunks) publishes it in parts through real Raft; every
// follower reads it whole, and one restarted from its snapshot on disk
// has it still.
func TestClusterManifestInParts(t *testing.T) {
	manifest := syntheticManifest(t, 80_000)
	if len(manifest) <= MaxManifestLen {
		t.Fatalf("synthetic manifest of %d bytes fits one record", len(manifest))
	}
	parts, err := SplitManifest(testFingerprint, manifest)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("manifest of %d bytes: %d parts", len(manifest), len(parts))

	cl := newCluster(t)
	a := cl.addHost(true)
	cl.start(a, WithManifest(manifest))
	b, c := cl.addHost(true), cl.addHost(true)
	cl.start(b, WithBootstrap(a.info()))
	cl.start(c, WithBootstrap(a.info()))
	took := cl.waitAll("the manifest replicated whole", 30*time.Second, func(s State) bool {
		return s.Len() == 3 && bytes.Equal(s.Manifest(), manifest)
	})
	t.Logf("every member has the manifest %v after the joins began", took.Round(time.Millisecond))

	// A follower reads it as a joiner would: a chunk manifest of the model.
	var m chunks.Manifest
	if err := m.UnmarshalBinary(b.c().State().Manifest()); err != nil {
		t.Fatal(err)
	}
	if m.NumChunks() != 80_000 || m.Fingerprint != testFingerprint {
		t.Fatalf("follower's manifest: %d chunks of %q", m.NumChunks(), m.Fingerprint)
	}
	// Each part is its own record in the log; none was appended twice.
	if got, total := b.c().State().ManifestProgress(); got != 0 || total != 0 {
		t.Fatalf("parts still under way once whole: %d/%d", got, total)
	}

	// b writes a snapshot (the manifest is larger than any record) and
	// comes back from its data dir alone.
	// (Raft refuses while a configuration change is being applied.)
	var snapErr error
	if _, ok := cl.until(30*time.Second, func() bool { snapErr = b.c().rn.raft.Snapshot().Error(); return snapErr == nil }); !ok {
		t.Fatalf("b takes no snapshot: %v", snapErr)
	}
	b.kill()
	b.startHost()
	cl.start(b)
	cl.await("the restarted follower has the manifest", 30*time.Second, func() bool {
		return bytes.Equal(b.c().State().Manifest(), manifest)
	})
}
