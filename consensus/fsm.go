package consensus

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stratanet/strata/layers"
)

// Member is one member of the swarm as the replicated state knows it.
type Member struct {
	ID       string
	Caps     Capabilities
	Addrs    []string
	JoinedAt time.Time // the first join; a rejoin after leaving starts anew
	// Draining: the member announced that it is leaving.
	Draining bool
	// LaggardUntil: the member missed a warmup deadline and is left out
	// of plans until then.
	LaggardUntil time.Time
}

// Pending is a proposed map in warmup.
type Pending struct {
	Map      layers.LayerMap
	Since    time.Time // when it was proposed
	Deadline time.Time
	Reason   string
	// loads holds the nodes that must load something, and whether each
	// has reported ready. Never mutated once built.
	loads map[string]bool
}

// Ready reports whether node is ready for the pending map: it reported
// StageReady, or it loads nothing (it serves no new layer).
func (p Pending) Ready(node string) bool {
	ready, loads := p.loads[node]
	return ready || !loads
}

// Loads reports whether node must load layers for the pending map.
func (p Pending) Loads(node string) bool {
	_, ok := p.loads[node]
	return ok
}

// Waiting lists, sorted, the nodes that must still report ready.
func (p Pending) Waiting() []string {
	var out []string
	for id, ready := range p.loads {
		if !ready {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// AllReady reports whether every node of the pending map is ready.
func (p Pending) AllReady() bool { return len(p.Waiting()) == 0 }

// Moves lists the range changes from the committed map to the pending
// one, in node order. LoadBytes is left zero: it needs the model.
func (p Pending) Moves(committed layers.LayerMap) []layers.Move {
	var out []layers.Move
	ids := append(committed.Nodes(), p.Map.Nodes()...)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	for _, id := range ids {
		from, _ := committed.Range(id)
		to, _ := p.Map.Range(id)
		if from != to {
			out = append(out, layers.Move{Node: id, From: from, To: to})
		}
	}
	return out
}

// State is the swarm's replicated state: the fold of every record in the
// log. It is a value that is never changed in place: Apply returns a new
// State, and the maps and slices it shares with its predecessor are
// never written again, so a State may be read from any goroutine.
type State struct {
	fingerprint string
	members     map[string]Member
	committed   layers.LayerMap // Layers == 0: nothing committed yet
	pending     *Pending
	bans        map[string]time.Time // evicted for a fault, until (fault.go)
	applied     uint64               // records folded in (refused ones do not count)
	last        time.Time            // At of the last record folded in
	manifest    []byte               // the model's manifest (manifest.go); nil: none
	parts       *manifestParts       // a manifest's parts so far, while it has none
	config      SwarmConfig          // the swarm's settings (swarmconfig.go)
	stewards    Stewardship          // the steward set (stewards.go)
}

// Fingerprint is the swarm's model fingerprint ("" before the first join).
func (s State) Fingerprint() string { return s.fingerprint }

// Applied counts the records folded into the state.
func (s State) Applied() uint64 { return s.applied }

// LastAt is the leader's clock at the last record folded in.
func (s State) LastAt() time.Time { return s.last }

// Members returns the members sorted by ID.
func (s State) Members() []Member {
	out := make([]Member, 0, len(s.members))
	for _, id := range slices.Sorted(maps.Keys(s.members)) {
		m, _ := s.Member(id)
		out = append(out, m)
	}
	return out
}

// Member returns one member.
func (s State) Member(id string) (Member, bool) {
	m, ok := s.members[id]
	m.Addrs = slices.Clone(m.Addrs)
	return m, ok
}

// IsMember reports whether id is a member.
func (s State) IsMember(id string) bool {
	_, ok := s.members[id]
	return ok
}

// Len is the number of members.
func (s State) Len() int { return len(s.members) }

// Committed returns the committed map (Layers == 0 before the first
// commit).
func (s State) Committed() layers.LayerMap {
	m := s.committed
	m.Stages = slices.Clone(m.Stages)
	return m
}

// Pending returns the proposed map in warmup, if any.
func (s State) Pending() (Pending, bool) {
	if s.pending == nil {
		return Pending{}, false
	}
	p := *s.pending
	p.Map.Stages = slices.Clone(p.Map.Stages)
	return p, true
}

// Apply folds one record into the state and returns the new state. It is
// a pure function of the state and the record: no clock, no randomness,
// no I/O. A record the state does not admit gives an error wrapping
// ErrRejected, ErrStale, ErrUnknownMember or ErrFingerprint, and the
// state is unchanged; s itself is never modified.
func (s State) Apply(r Record) (State, error) {
	var err error
	next := s
	f := fold{s: &next}
	switch e := r.Event.(type) {
	case NodeJoined:
		err = f.nodeJoined(r.At, e)
	case NodeLeft:
		err = f.nodeLeft(e)
	case NodeDraining:
		err = f.nodeDraining(e)
	case MapProposed:
		err = f.mapProposed(r.At, e)
	case StageReady:
		err = f.stageReady(e)
	case MapCommitted:
		err = f.mapCommitted(e)
	case WarmupAbandoned:
		err = f.warmupAbandoned(e)
	case NodeFaulted:
		err = f.nodeFaulted(r.At, e)
	case ManifestPublished:
		err = f.manifestPublished(e)
	case ManifestPart:
		err = f.manifestPart(e)
	case SwarmConfigSet:
		err = f.swarmConfigSet(e)
	case SessionTokensSet:
		err = f.sessionTokensSet(e)
	case StewardsSet:
		err = f.stewardsSet(e)
	case nil:
		err = fmt.Errorf("%w: no event", ErrRejected)
	default:
		err = fmt.Errorf("%w: unknown event %T", ErrRejected, e)
	}
	if err != nil {
		return s, err
	}
	next.applied++
	if r.At.After(next.last) {
		next.last = r.At
	}
	return next, nil
}

// Fold applies records in order from the empty state, skipping those the
// state refuses, as the replicated FSM does.
func Fold(records ...Record) State {
	var s State
	for _, r := range records {
		s, _ = s.Apply(r)
	}
	return s
}

// fold owns the rules by which one record changes the state: a handler
// per event, each of which checks the record against the state and
// changes the copy s (State.Apply's next), writing no map or slice it
// shares with the state it was copied from.
type fold struct{ s *State }

// setMember sets m in a copy of the members map.
func (f fold) setMember(m Member) {
	s := f.s
	ms := maps.Clone(s.members)
	if ms == nil {
		ms = make(map[string]Member)
	}
	ms[m.ID] = m
	s.members = ms
}

func (f fold) nodeJoined(at time.Time, e NodeJoined) error {
	s := f.s
	switch {
	case e.Node == "" || e.Fingerprint == "":
		return fmt.Errorf("%w: join without node or fingerprint", ErrRejected)
	case s.fingerprint != "" && e.Fingerprint != s.fingerprint:
		return fmt.Errorf("%w: node %s has %q, swarm has %q", ErrFingerprint, e.Node, e.Fingerprint, s.fingerprint)
	case len(e.Addrs) > MaxAddrs:
		return fmt.Errorf("%w: %d addresses", ErrRejected, len(e.Addrs))
	case e.Caps.Hardware.Validate() != nil:
		return fmt.Errorf("%w: %v", ErrRejected, e.Caps.Hardware.Validate())
	}
	if until, banned := s.Banned(e.Node, at); banned {
		return fmt.Errorf("%w: %s until %v", ErrBanned, e.Node, until)
	}
	m, rejoin := s.members[e.Node]
	if !rejoin {
		if len(s.members) >= MaxMembers {
			return fmt.Errorf("%w: swarm is full (%d members)", ErrRejected, MaxMembers)
		}
		m = Member{ID: e.Node, JoinedAt: at}
	}
	m.Caps, m.Addrs = e.Caps, slices.Clone(e.Addrs)
	m.Draining, m.LaggardUntil = false, time.Time{}
	s.fingerprint = e.Fingerprint
	f.setMember(m)
	return nil
}

func (f fold) nodeLeft(e NodeLeft) error {
	s := f.s
	if _, ok := s.members[e.Node]; !ok {
		return fmt.Errorf("%w: %s cannot leave", ErrUnknownMember, e.Node)
	}
	ms := maps.Clone(s.members)
	delete(ms, e.Node)
	s.members = ms
	return nil
}

func (f fold) nodeDraining(e NodeDraining) error {
	s := f.s
	m, ok := s.members[e.Node]
	if !ok {
		return fmt.Errorf("%w: %s cannot drain", ErrUnknownMember, e.Node)
	}
	if m.Draining {
		return fmt.Errorf("%w: %s is already draining", ErrStale, e.Node)
	}
	m.Draining = true
	f.setMember(m)
	return nil
}

func (f fold) mapProposed(at time.Time, e MapProposed) error {
	s := f.s
	m := e.Map
	if err := m.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	if want := nextEpoch(s.committed.Epoch); m.Epoch != want {
		return fmt.Errorf("%w: proposal of epoch %d, want %d", ErrRejected, m.Epoch, want)
	}
	if s.committed.Layers != 0 && m.Layers != s.committed.Layers {
		return fmt.Errorf("%w: proposal has %d layers, committed map %d", ErrRejected, m.Layers, s.committed.Layers)
	}
	if !m.Covers() {
		return fmt.Errorf("%w: proposal leaves gaps %v", ErrRejected, m.Gaps())
	}
	for _, st := range m.Stages {
		mem, ok := s.members[st.Node]
		if !ok {
			return fmt.Errorf("%w: proposal places %s", ErrUnknownMember, st.Node)
		}
		if from, _ := s.committed.Range(st.Node); mem.Draining && st.Range.Intersect(from) != st.Range {
			return fmt.Errorf("%w: proposal gives draining %s new layers", ErrRejected, st.Node)
		}
	}
	p := &Pending{Map: m, Since: at, Deadline: e.Deadline, Reason: e.Reason, loads: map[string]bool{}}
	for _, st := range m.Stages {
		from, _ := s.committed.Range(st.Node)
		if st.Range.Intersect(from) == st.Range {
			continue // serves no new layer
		}
		ready := false
		if old := s.pending; old != nil {
			// A node that already loaded the same range for the proposal
			// this one replaces stays ready.
			r, _ := old.Map.Range(st.Node)
			ready = r == st.Range && old.loads[st.Node]
		}
		p.loads[st.Node] = ready
	}
	s.pending = p
	return nil
}

func (f fold) stageReady(e StageReady) error {
	s := f.s
	p := s.pending
	if p == nil || p.Map.Epoch != e.Epoch {
		return fmt.Errorf("%w: ready for epoch %d, none pending", ErrStale, e.Epoch)
	}
	if r, _ := p.Map.Range(e.Node); r != e.Range {
		return fmt.Errorf("%w: %s ready for %v, pending range %v", ErrStale, e.Node, e.Range, r)
	}
	ready, loads := p.loads[e.Node]
	if !loads || ready {
		return fmt.Errorf("%w: %s has nothing to report", ErrStale, e.Node)
	}
	np := *p
	np.loads = maps.Clone(p.loads)
	np.loads[e.Node] = true
	s.pending = &np
	return nil
}

func (f fold) mapCommitted(e MapCommitted) error {
	s := f.s
	p := s.pending
	if p == nil || p.Map.Epoch != e.Epoch {
		return fmt.Errorf("%w: commit of epoch %d, none pending", ErrStale, e.Epoch)
	}
	if w := p.Waiting(); len(w) > 0 {
		return fmt.Errorf("%w: commit of epoch %d with %d stage(s) not ready, first %s", ErrRejected, e.Epoch, len(w), w[0])
	}
	for _, st := range p.Map.Stages {
		if _, ok := s.members[st.Node]; !ok {
			return fmt.Errorf("%w: commit of epoch %d places %s, who left", ErrRejected, e.Epoch, st.Node)
		}
	}
	s.committed = p.Map
	s.pending = nil
	return nil
}

func (f fold) warmupAbandoned(e WarmupAbandoned) error {
	s := f.s
	p := s.pending
	if p == nil || p.Map.Epoch != e.Epoch {
		return fmt.Errorf("%w: abandon of epoch %d, none pending", ErrStale, e.Epoch)
	}
	s.pending = nil
	for _, id := range e.Laggards {
		if m, ok := s.members[id]; ok && e.Until.After(m.LaggardUntil) {
			m.LaggardUntil = e.Until
			f.setMember(m)
		}
	}
	return nil
}

// fsm is the raft.FSM: it holds the current State and folds each log
// entry into it. Reads load the state atomically, without locks.
type fsm struct {
	state   atomic.Pointer[State]
	index   atomic.Uint64                       // last raft index applied
	onApply func(idx uint64, r Record, s State) // after each admitted record
	onReset func(s State)                       // after a restore
}

func newFSM() *fsm {
	f := &fsm{}
	f.state.Store(&State{})
	return f
}

func (f *fsm) current() State { return *f.state.Load() }

// Apply implements raft.FSM. The response is nil or the error that
// refused the record; a refused record leaves the state as it was.
func (f *fsm) Apply(l *raft.Log) any {
	f.index.Store(l.Index)
	if l.Type != raft.LogCommand {
		return nil
	}
	r, err := UnmarshalRecord(l.Data)
	if err != nil {
		return err
	}
	next, err := f.current().Apply(r)
	if err != nil {
		return err
	}
	f.state.Store(&next)
	if f.onApply != nil {
		f.onApply(l.Index, r, next)
	}
	return nil
}

// Snapshot implements raft.FSM: the state is immutable, so the snapshot
// is the current value, encoded later by Persist.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{s: f.current()}, nil
}

// Restore implements raft.FSM.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, MaxSnapshotSize+1))
	if err != nil {
		return fmt.Errorf("consensus: read snapshot: %w", err)
	}
	var s State
	if err := s.UnmarshalBinary(b); err != nil {
		return err
	}
	f.state.Store(&s)
	if f.onReset != nil {
		f.onReset(s)
	}
	return nil
}

type fsmSnapshot struct{ s State }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	b, err := s.s.MarshalBinary()
	if err == nil {
		_, err = sink.Write(b)
	}
	if err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
