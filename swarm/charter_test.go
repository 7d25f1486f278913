package swarm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestCharter: a charter verifies for its own swarm and model only, and a
// rival cannot make one in another founder's name: a changed field, a
// founder swapped in, or a signature by another key all fail.
func TestCharter(t *testing.T) {
	keyA, _, _ := crypto.GenerateEd25519Key(nil)
	keyB, _, _ := crypto.GenerateEd25519Key(nil)
	c, err := NewCharter("pub", "fp-1", keyA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeCharter(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := got.Verify("pub", "fp-1"); err != nil {
		t.Fatalf("own charter: %v", err)
	}
	idA, _ := peer.IDFromPrivateKey(keyA)
	idB, _ := peer.IDFromPrivateKey(keyB)
	if got.Founder != idA {
		t.Fatalf("founder %s, want %s", got.Founder, idA)
	}
	rival, _ := NewCharter("pub", "fp-1", keyB)
	bad := map[string]*Charter{
		"other swarm":              {Swarm: "pub2", Fingerprint: "fp-1", Founder: idA, Sig: c.Sig},
		"other model":              {Swarm: "pub", Fingerprint: "fp-2", Founder: idA, Sig: c.Sig},
		"founder claimed, B's sig": {Swarm: "pub", Fingerprint: "fp-1", Founder: idA, Sig: rival.Sig},
		"founder swapped, A's sig": {Swarm: "pub", Fingerprint: "fp-1", Founder: idB, Sig: c.Sig},
	}
	for name, ch := range bad {
		if err := ch.Verify("pub", "fp-1"); !errors.Is(err, ErrBadCharter) {
			t.Errorf("%s: %v, want ErrBadCharter", name, err)
		}
	}
	if err := c.Verify("pub2", "fp-1"); !errors.Is(err, ErrBadCharter) {
		t.Errorf("checked for another swarm: %v", err)
	}
	for i := range b { // every truncation fails to decode, never panics
		if _, err := DecodeCharter(b[:i]); !errors.Is(err, ErrBadCharter) {
			t.Fatalf("truncated at %d: %v", i, err)
		}
	}
	if _, err := DecodeCharter(append(b, 0)); !errors.Is(err, ErrBadCharter) {
		t.Errorf("trailing byte: %v", err)
	}
}

// TestFoundRivalSwarms: two founders found swarm "pub" for one model on
// the same stand-in DHT. A joiner pinned to either joins only that one's
// members, every time; an unpinned first-time joiner is refused with both
// founders listed; a node that joined A's swarm once (its data dir
// recorded A) joins A again beside the rival, refuses B's swarm once A's
// members are gone, and refuses a pin on B at start.
func TestFoundRivalSwarms(t *testing.T) {
	servers := newDHTServers(t, 3)
	const fp = "fp-model-aaaa"
	public := func(extra ...Option) []Option {
		return append([]Option{WithSwarmName("pub"), WithModel("aaaa"), WithModelFingerprint(fp), WithPublicDHT(servers...)}, extra...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	founderA := newTestHost(t, public(WithFounder())...)
	founderA.Discovery().AdvertisePublic()
	waitProviders(t, ctx, founderA, fp, founderA.ID())

	// First use: only A's swarm exists; the joiner records its founder.
	tofuDir := t.TempDir()
	first := newTestHost(t, public(WithDataDir(tofuDir))...)
	found, err := first.Discovery().FindSwarm(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].ID != founderA.ID() || first.Charter() == nil || first.Charter().Founder != founderA.ID() {
		t.Fatalf("first joiner found %v with charter %+v, want founder A %s", found, first.Charter(), founderA.ID())
	}
	first.Discovery().AdvertisePublic() // now a member of A's swarm that serves A's charter
	// A member that joined through an address learns the charter from its peers.
	byAddr := newTestHost(t, public(bootstrapOf(founderA))...)
	byAddr.Discovery().AdvertisePublic()
	waitFor(t, 20*time.Second, "a member joined by address has A's charter", func() bool {
		c := byAddr.Charter()
		return c != nil && c.Founder == founderA.ID()
	})
	first.Close()

	founderB := newTestHost(t, public(WithFounder())...)
	founderB.Discovery().AdvertisePublic()
	memberB := newTestHost(t, public(WithPinnedFounder(founderB.ID()))...)
	if _, err := memberB.Discovery().FindSwarm(ctx); err != nil {
		t.Fatal(err)
	}
	memberB.Discovery().AdvertisePublic()
	waitProviders(t, ctx, founderA, fp, founderA.ID(), byAddr.ID(), founderB.ID(), memberB.ID())

	swarmA := map[peer.ID]bool{founderA.ID(): true, byAddr.ID(): true}
	swarmB := map[peer.ID]bool{founderB.ID(): true, memberB.ID(): true}
	for i := range 3 {
		for _, tc := range []struct {
			founder peer.ID
			members map[peer.ID]bool
		}{{founderA.ID(), swarmA}, {founderB.ID(), swarmB}} {
			j := newTestHost(t, public(WithPinnedFounder(tc.founder))...)
			found, err := j.Discovery().FindSwarm(ctx)
			if err != nil {
				t.Fatalf("run %d, pinned to %s: %v", i, tc.founder, err)
			}
			for _, ai := range found {
				if !tc.members[ai.ID] {
					t.Fatalf("run %d: a joiner pinned to %s found %s, a member of the rival swarm", i, tc.founder, ai.ID)
				}
			}
			if len(found) == 0 || j.Charter().Founder != tc.founder {
				t.Fatalf("run %d: found %v, charter %+v", i, found, j.Charter())
			}
			j.Close()
		}
	}

	// Unpinned and first-time: refused, both founders named.
	fresh := newTestHost(t, public(WithDataDir(t.TempDir()))...)
	found, err = fresh.Discovery().FindSwarm(ctx)
	if !errors.Is(err, ErrRivalFounders) {
		fresh.pub.mu.Lock()
		t.Logf("found %v; members %v; rejected %v; A %s B %s", found, fresh.pub.members, fresh.pub.rejected, founderA.ID(), founderB.ID())
		fresh.pub.mu.Unlock()
		t.Fatalf("unpinned first-time joiner: %v, want ErrRivalFounders", err)
	}
	for _, want := range []string{founderA.ID().String(), founderB.ID().String(), "--swarm-founder"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	t.Logf("unpinned joiner: %v", err)
	if fresh.Charter() != nil {
		t.Errorf("a refused joiner adopted a charter: %+v", fresh.Charter())
	}
	if data, err := os.ReadFile(filepath.Join(fresh.cfg.dataDir, pinFile)); err == nil {
		t.Errorf("a refused joiner recorded a founder: %s", data)
	}

	// Trust on first use: the data dir pins A.
	again := newTestHost(t, public(WithDataDir(tofuDir))...)
	if again.PinnedFounder() != founderA.ID() {
		t.Fatalf("pinned founder %q from the data dir, want %s", again.PinnedFounder(), founderA.ID())
	}
	found, err = again.Discovery().FindSwarm(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range found {
		if !swarmA[ai.ID] {
			t.Fatalf("the TOFU joiner found %s, a member of the rival swarm", ai.ID)
		}
	}
	again.Close()
	ctxNew, cancelNew := context.WithTimeout(ctx, 20*time.Second)
	defer cancelNew()
	_, err = newHostErr(ctxNew, public(WithDataDir(tofuDir), WithPinnedFounder(founderB.ID()))...)
	if !errors.Is(err, ErrFounderMismatch) || !strings.Contains(err.Error(), founderA.ID().String()) {
		t.Fatalf("pinned to B with a data dir that recorded A: %v, want ErrFounderMismatch naming A", err)
	}

	// A's members leave: the TOFU joiner refuses B's swarm.
	founderA.Close()
	byAddr.Close()
	later := newTestHost(t, public(WithDataDir(tofuDir))...)
	fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
	defer fcancel()
	_, err = later.Discovery().FindSwarm(fctx)
	if !errors.Is(err, ErrFounderMismatch) || !strings.Contains(err.Error(), founderB.ID().String()) {
		t.Fatalf("TOFU joiner with only the rival up: %v, want ErrFounderMismatch naming B", err)
	}
	t.Logf("TOFU joiner, rival only: %v", err)
}

// waitProviders waits until the stand-in DHT lists exactly want as the
// providers of swarm "pub" for fp, looked up from h.
func waitProviders(t *testing.T, ctx context.Context, h *Host, fp string, want ...peer.ID) {
	t.Helper()
	key := PublicRendezvous("pub", fp)
	waitFor(t, 30*time.Second, "the rendezvous lists every member", func() bool {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		got := map[peer.ID]bool{}
		for ai := range h.pub.dht.FindProvidersAsync(lctx, key, 0) {
			got[ai.ID] = true
		}
		for _, id := range want {
			if !got[id] && id != h.ID() {
				return false
			}
		}
		return true
	})
}

func newHostErr(ctx context.Context, opts ...Option) (*Host, error) {
	h, err := New(ctx, append([]Option{WithListenAddrs(loopback), WithNATPortMap(false)}, opts...)...)
	if err == nil {
		h.Close()
	}
	return h, err
}

// TestSnapshotCharter: a snapshot carries its swarm's charter through the
// signed round trip, and SnapshotFounder names the founder only when the
// charter is signed by it for the swarm and model the snapshot names.
func TestSnapshotCharter(t *testing.T) {
	sk, id := testKey(t)
	founderKey, founder := testKey(t)
	s := sampleSnapshot(t, id)
	if f, err := SnapshotFounder(s); f != "" || err != nil {
		t.Fatalf("no charter: %q %v", f, err)
	}
	ch, err := NewCharter(s.Swarm, s.Fingerprint, founderKey)
	if err != nil {
		t.Fatal(err)
	}
	if s.Charter, err = ch.MarshalBinary(); err != nil {
		t.Fatal(err)
	}
	signed, err := SignSnapshot(s, sk)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifySnapshot(signed, id, s.Nonce)
	if err != nil {
		t.Fatal(err)
	}
	if f, err := SnapshotFounder(got); f != founder || err != nil {
		t.Fatalf("founder %q %v, want %s", f, err, founder)
	}
	other, _ := NewCharter("another-swarm", s.Fingerprint, founderKey)
	got.Charter, _ = other.MarshalBinary()
	if f, err := SnapshotFounder(got); f != "" || !errors.Is(err, ErrBadCharter) {
		t.Fatalf("another swarm's charter: %q %v", f, err)
	}
	plain, err := sampleSnapshot(t, id).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeSnapshot(append(plain, 0, 0)); !errors.Is(err, ErrSnapshotSchema) {
		t.Fatalf("an empty charter: %v", err)
	}
}
