package consensus

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Stewards: the members that may vote (issue 36). A public swarm lets
// anyone join, so a crowd of Sybil identities that became voters could
// elect its own leader and write the layer map. Once the replicated
// state holds a steward set, only stewards are voter-eligible (Decide
// step 4): everyone else serves layers and routes requests as a Raft
// non-voter.
//
// The set is a signed event. The first is valid only when the founder
// signed it; each later one only when a steward of the current set did.
// The founder is the swarm's senior member: the earliest JoinedAt (then
// the lowest ID). In a new swarm that is the node that bootstrapped the
// cluster, since a first leader appends its own join before anything
// else (Decide step 1); it is read from the members, so no new state (and
// no new snapshot section) exists until a swarm uses stewards. The
// signature covers a domain prefix, the swarm's identity (SwarmID: a
// hash of the model fingerprint, the founder and its join time), the
// set's sequence number and the list, so that a set signed for one swarm
// cannot be replayed into another, nor an old one of this swarm replayed
// over a newer one. Every member checks the signature when it folds the
// record (State.Apply), not only the leader that appended it.

// KindStewardsSet is the kind of StewardsSet.
const KindStewardsSet Kind = 16

// MaxStewards bounds a steward set: stewards are the voters' pool, and
// Raft runs 3 or 5 voters.
const MaxStewards = 64

// MaxStewardSigLen bounds a steward set's signature (an Ed25519 one is
// 64 bytes; other key types are longer).
const MaxStewardSigLen = 1024

// stewardsDomain separates steward-set signatures from anything else a
// host key signs (receipts use their own).
const stewardsDomain = "strata/stewards/1\x00"

// swarmIDDomain prefixes what SwarmID hashes.
const swarmIDDomain = "strata/swarm-id/1\x00"

// ErrBadStewards: a steward set that is not signed by the founder (the
// first) or by a current steward (later ones), or whose signature does
// not verify: forged, tampered with, unsigned, or replayed from another
// swarm. The state is unchanged.
var ErrBadStewards = errors.New("consensus: steward set not signed by the founder or a steward")

// StewardsSet: the swarm's stewards are now Stewards. Seq is 1 for the
// founder's set and grows by one with each change.
type StewardsSet struct {
	Seq      uint64
	Stewards []string // peer IDs, sorted, distinct
	Signer   string   // the founder's or a current steward's peer ID
	Sig      []byte
}

// Kind implements Event.
func (StewardsSet) Kind() Kind { return KindStewardsSet }

func (e StewardsSet) appendTo(b []byte) []byte {
	b = binary.AppendUvarint(b, e.Seq)
	b = appendStrs(b, e.Stewards)
	b = appendStr(b, e.Signer)
	return appendBytes(b, e.Sig)
}

func decodeStewardsSet(d decoder) StewardsSet {
	e := StewardsSet{Seq: d.Uvarint("steward seq", 1<<62)}
	e.Stewards = d.stewards()
	e.Signer = d.id("signer")
	e.Sig = d.bytes("signature", MaxStewardSigLen)
	if d.Err() == nil && e.Seq == 0 {
		d.Fail("steward seq 0")
	}
	return e
}

// stewards reads a steward list: 1 to MaxStewards IDs in increasing
// order, so that one set has one encoding.
func (d decoder) stewards() []string {
	n := d.count("stewards", MaxStewards, 2)
	if d.Err() == nil && n == 0 {
		d.Fail("no stewards")
		return nil
	}
	out := make([]string, 0, n)
	for range n {
		s := d.id("steward")
		if d.Err() != nil {
			return nil
		}
		if len(out) > 0 && s <= out[len(out)-1] {
			d.Fail("stewards not in increasing order at %q", s)
			return nil
		}
		out = append(out, s)
	}
	return out
}

// signedBytes is what the signature covers: the domain, the swarm, the
// sequence number, the list and the signer.
func (e StewardsSet) signedBytes(swarm [32]byte) []byte {
	b := append([]byte(stewardsDomain), swarm[:]...)
	b = binary.AppendUvarint(b, e.Seq)
	b = appendStrs(b, e.Stewards)
	return appendStr(b, e.Signer)
}

// SignStewards makes the steward set that follows s's: the given
// stewards (in any order; duplicates dropped), signed with key for the
// swarm s is. Whether the key may sign it (the founder's for the first
// set, a steward's later) is checked where it counts, by State.Apply.
func SignStewards(s State, stewards []string, key crypto.PrivKey) (StewardsSet, error) {
	signer, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return StewardsSet{}, fmt.Errorf("%w: %w", ErrBadStewards, err)
	}
	swarm, ok := s.SwarmID()
	if !ok {
		return StewardsSet{}, fmt.Errorf("%w: the swarm has no members yet", ErrRejected)
	}
	ids := slices.Clone(stewards)
	slices.Sort(ids)
	e := StewardsSet{Seq: s.stewards.seq + 1, Stewards: slices.Compact(ids), Signer: signer.String()}
	if err := validStewards(e.Stewards); err != nil {
		return StewardsSet{}, err
	}
	if e.Sig, err = key.Sign(e.signedBytes(swarm)); err != nil {
		return StewardsSet{}, fmt.Errorf("consensus: sign stewards: %w", err)
	}
	return e, nil
}

// validStewards: 1 to MaxStewards peer IDs that carry their public key
// (so that each can sign a later set), sorted and distinct.
func validStewards(ids []string) error {
	if len(ids) == 0 || len(ids) > MaxStewards {
		return fmt.Errorf("%w: %d stewards (want 1 to %d)", ErrRejected, len(ids), MaxStewards)
	}
	for i, id := range ids {
		if i > 0 && id <= ids[i-1] {
			return fmt.Errorf("%w: stewards not sorted and distinct at %q", ErrRejected, id)
		}
		p, err := peer.Decode(id)
		if err != nil {
			return fmt.Errorf("%w: steward %q is no peer ID: %w", ErrRejected, id, err)
		}
		if _, err := p.ExtractPublicKey(); err != nil {
			return fmt.Errorf("%w: steward %s has no inlined public key: %w", ErrRejected, id, err)
		}
	}
	return nil
}

// Founder is the swarm's senior member, who may sign the first steward
// set: the earliest join, then the lowest ID; false with no members.
func (s State) Founder() (Member, bool) {
	var f Member
	found := false
	for _, m := range s.members {
		if !found || m.JoinedAt.Before(f.JoinedAt) || (m.JoinedAt.Equal(f.JoinedAt) && m.ID < f.ID) {
			f, found = m, true
		}
	}
	return f, found
}

// SwarmID names the swarm in steward signatures. Once a steward set was
// applied it is the one that set was signed for, for good; before, it is
// derived from the fingerprint and the founder (Founder) with its join
// time, which no other swarm shares. False with no members.
func (s State) SwarmID() ([32]byte, bool) {
	if s.stewards.seq > 0 {
		return s.stewards.swarmID, true
	}
	f, ok := s.Founder()
	if !ok {
		return [32]byte{}, false
	}
	b := append([]byte(swarmIDDomain), s.fingerprint...)
	b = append(b, 0)
	b = appendStr(b, f.ID)
	b = binary.AppendVarint(b, unixNano(f.JoinedAt))
	return sha256.Sum256(b), true
}

// Stewardship is the swarm's steward set as the replicated state holds
// it: the stewards, the set's sequence number (0: none yet) and the
// swarm the set was signed for.
type Stewardship struct {
	ids     []string
	seq     uint64
	swarmID [32]byte
}

// Stewards is the swarm's steward set.
func (s State) Stewards() Stewardship { return s.stewards }

// List lists the stewards, sorted; nil while the swarm has none (then
// voters are chosen among all stable members, as before stewards).
func (st Stewardship) List() []string { return slices.Clone(st.ids) }

// Empty reports whether the swarm has no steward set.
func (st Stewardship) Empty() bool { return st.seq == 0 }

// Seq is the sequence number of the steward set (0: none).
func (st Stewardship) Seq() uint64 { return st.seq }

// Includes reports whether id is a steward.
func (st Stewardship) Includes(id string) bool {
	_, ok := slices.BinarySearch(st.ids, id)
	return ok
}

// mayVote: a swarm with stewards lets only them vote; one without lets
// anyone (the other criteria are Decide's).
func (st Stewardship) mayVote(id string) bool { return st.Empty() || st.Includes(id) }

func (f fold) stewardsSet(e StewardsSet) error {
	s := f.s
	if e.Seq != s.stewards.seq+1 {
		return fmt.Errorf("%w: steward set %d, want %d", ErrStale, e.Seq, s.stewards.seq+1)
	}
	if err := validStewards(e.Stewards); err != nil {
		return err
	}
	swarm, ok := s.SwarmID()
	if !ok {
		return fmt.Errorf("%w: steward set before any member", ErrRejected)
	}
	if !s.Stewards().Empty() {
		if !s.Stewards().Includes(e.Signer) {
			return fmt.Errorf("%w: %s is no steward", ErrBadStewards, e.Signer)
		}
	} else if f, _ := s.Founder(); e.Signer != f.ID {
		return fmt.Errorf("%w: first set signed by %s, the founder is %s", ErrBadStewards, e.Signer, f.ID)
	}
	signer, err := peer.Decode(e.Signer)
	if err != nil {
		return fmt.Errorf("%w: signer %q: %w", ErrBadStewards, e.Signer, err)
	}
	pub, err := signer.ExtractPublicKey()
	if err != nil {
		return fmt.Errorf("%w: no public key in %s: %w", ErrBadStewards, e.Signer, err)
	}
	if ok, err := pub.Verify(e.signedBytes(swarm), e.Sig); err != nil || !ok {
		return fmt.Errorf("%w: bad signature by %s", ErrBadStewards, e.Signer)
	}
	s.stewards.swarmID, s.stewards.seq, s.stewards.ids = swarm, e.Seq, slices.Clone(e.Stewards)
	return nil
}

// appendStewardsSection writes the steward section: the swarm ID, the
// sequence number and the list.
func appendStewardsSection(b []byte, s State) []byte {
	b = append(b, s.stewards.swarmID[:]...)
	b = binary.AppendUvarint(b, s.stewards.seq)
	return appendStrs(b, s.stewards.ids)
}

func decodeStewardsSection(d decoder, s *State) {
	id := d.Take(32, "swarm id")
	seq := d.Uvarint("steward seq", 1<<62)
	list := d.stewards()
	if d.Err() != nil {
		return
	}
	if seq == 0 {
		d.Fail("steward seq 0")
		return
	}
	copy(s.stewards.swarmID[:], id)
	s.stewards.seq, s.stewards.ids = seq, list
}

// SetStewards makes ids the swarm's stewards, signed with this node's
// host key. Only the leader appends it (ErrNotLeader elsewhere), and the
// fold admits it only when this node is the founder (the first set) or a
// steward (ErrBadStewards otherwise). Setting the set the swarm already
// has is not an error.
func (c *Consensus) SetStewards(ctx context.Context, ids []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !c.IsLeader() {
		return ErrNotLeader
	}
	key := c.h.Key()
	if key == nil {
		return fmt.Errorf("%w: no host key for %s", ErrBadStewards, c.id)
	}
	s := c.fsm.current()
	e, err := SignStewards(s, ids, key)
	if err != nil {
		return err
	}
	if !s.Stewards().Empty() && slices.Equal(e.Stewards, s.stewards.ids) {
		return nil
	}
	if err := c.rn.apply(e); err != nil {
		return err
	}
	kick(c.kickL)
	return nil
}

// AppendStewards appends a steward set signed elsewhere (a steward that
// does not lead signs, the leader appends). Only the leader appends
// (ErrNotLeader elsewhere); the fold checks the signature.
func (c *Consensus) AppendStewards(ctx context.Context, e StewardsSet) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !c.IsLeader() {
		return ErrNotLeader
	}
	if err := c.rn.apply(e); err != nil {
		return err
	}
	kick(c.kickL)
	return nil
}

// WithStewards names the stewards this node, as the swarm's founder,
// signs into the replicated state once it leads a swarm that has none
// (the founder may name itself). Elsewhere it does nothing: only the
// founder's signature makes a first set.
func WithStewards(ids ...string) Option {
	return func(c *config) error {
		list := slices.Clone(ids)
		slices.Sort(list)
		list = slices.Compact(list)
		if err := validStewards(list); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		c.stewards = list
		return nil
	}
}

// ensureStewards has a founder that does not lead ask the leader to
// append its steward set: leadership may have moved before the founder
// appended it, and only the founder can sign the first set. One request
// at a time (each ends within its timeout, so one per that period).
func (m *member) ensureStewards(s State, ms *memberState) {
	if len(m.cfg.stewards) == 0 || !s.Stewards().Empty() || m.rn.isLeader() || m.leaving.Load() {
		return
	}
	every := 4 * m.cfg.rpcTimeout
	if now := time.Now(); now.Sub(ms.stewardsAt) < every {
		return
	}
	e := m.foundingStewards(s, time.Now())
	if e == nil {
		return
	}
	ms.stewardsAt = time.Now()
	m.wg.Add(1) // the member loop holds the group open: Add is safe
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(m.ctx, every)
		defer cancel()
		if err := m.ctl.request(ctx, *e); err != nil && m.ctx.Err() == nil {
			m.log.Debugw("steward set request", "error", err)
		}
	}()
}

// foundingStewards is the founder's steward set for the leader's input:
// signed for the state as it is, and only when the fold would admit it
// (this node is the founder and the swarm has no set), so that the
// leader never appends a record every member refuses.
func (m *member) foundingStewards(s State, now time.Time) *StewardsSet {
	if len(m.cfg.stewards) == 0 || !s.Stewards().Empty() {
		return nil
	}
	if f, ok := s.Founder(); !ok || f.ID != m.id.String() {
		return nil
	}
	key := m.h.Key()
	if key == nil {
		return nil
	}
	e, err := SignStewards(s, m.cfg.stewards, key)
	if err != nil {
		return nil
	}
	if _, err := s.Apply(Record{At: now, Event: e}); err != nil {
		m.log.Warnw("founding steward set refused", "err", err)
		return nil
	}
	return &e
}
