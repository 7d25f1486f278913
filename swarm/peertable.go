package swarm

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Liveness is the peer table's verdict on a peer.
type Liveness uint8

// The verdicts.
const (
	// Hint: known from discovery or a connection, never heard from.
	Hint Liveness = iota
	// Alive: heartbeats arrive.
	Alive
	// Suspect: heartbeats are late or its last connection closed.
	Suspect
	// Dead: silent past the dead deadline; forgotten after expiry.
	Dead
)

func (l Liveness) String() string {
	switch l {
	case Hint:
		return "hint"
	case Alive:
		return "alive"
	case Suspect:
		return "suspect"
	case Dead:
		return "dead"
	}
	return "unknown"
}

// Peer is one row of the peer table, a copy that the caller owns. The
// Heartbeat it points to is shared and must not be modified.
type Peer struct {
	ID       peer.ID
	Liveness Liveness
	// Since is when Liveness last changed.
	Since time.Time
	// Heartbeat is the latest accepted heartbeat; nil if none yet.
	Heartbeat *Heartbeat
	// HeardAt is the local time the latest heartbeat arrived.
	HeardAt time.Time
	// Heard counts the heartbeats accepted from the peer.
	Heard uint64
	// Connected: we hold at least one connection to the peer.
	Connected bool
	// Relayed: the peer is reachable only through a circuit relay: its
	// heartbeat says so, or every connection we hold to it is relayed.
	// Routing charges its links more. (A host behind a NAT can still dial
	// out directly: Direct tells whether our own link is direct.)
	Relayed bool
	// Direct: we hold a connection to the peer that is not relayed.
	Direct bool
	// Link is how we are connected: direct, hole-punched or relayed.
	Link Link
	// RTT is our smoothed ping round trip to the peer; 0 if unmeasured.
	RTT time.Duration
	// Bandwidth is the smoothed bytes per second our link to the peer
	// carried in bandwidth probes (relayed links only); 0 if unmeasured.
	Bandwidth float64
	// Addrs are the addresses discovery or connections told us about.
	Addrs []ma.Multiaddr
	// Rejected counts the peer's rejected messages and frames.
	Rejected Rejections
}

// Rejections counts bad input from one peer, by reason.
type Rejections struct {
	Oversize uint64 // heartbeat above MaxHeartbeatSize or notice above its max
	Schema   uint64 // heartbeat that does not decode
	Sender   uint64 // heartbeat whose node ID is not its signer
	Clock    uint64 // heartbeat timestamp too far from our clock
	Frame    uint64 // stream frame above the maximum, or malformed
	// Rate: heartbeats past the per-peer rate, ignored (a peer that
	// floods; gossip's duplicates never count, pubsub drops them first).
	Rate uint64
}

// Total is the sum over reasons.
func (r Rejections) Total() uint64 {
	return r.Oversize + r.Schema + r.Sender + r.Clock + r.Frame + r.Rate
}

type rejectReason uint8

const (
	rejectOversize rejectReason = iota
	rejectSchema
	rejectSender
	rejectClock
	rejectFrame
	rejectRate
)

func (r rejectReason) String() string {
	return [...]string{"oversize", "schema", "sender", "clock", "frame", "rate"}[r]
}

func (r *Rejections) add(why rejectReason) {
	switch why {
	case rejectOversize:
		r.Oversize++
	case rejectSchema:
		r.Schema++
	case rejectSender:
		r.Sender++
	case rejectClock:
		r.Clock++
	case rejectFrame:
		r.Frame++
	case rejectRate:
		r.Rate++
	}
}

// Event is a change in the peer table.
type Event struct {
	Peer      peer.ID
	From, To  Liveness
	Forgotten bool // the row was removed (To is meaningless)
	At        time.Time
}

// maxRejectPeers bounds the per-peer rejection counters; peers past it
// share one counter, so that a flood of identities cannot grow memory.
const maxRejectPeers = 4096

type tableConfig struct {
	suspectAfter, deadAfter, connGrace, forgetAfter, hintTTL time.Duration
}

type entry struct {
	Peer
	connRelayed bool      // every connection we hold is relayed
	lostAt      time.Time // when the last connection closed; zero while connected
	touched     time.Time // first hint, or last connection activity
	lastTS      time.Time // timestamp of the latest accepted heartbeat
	// stalled is how long this process was stalled (its sweeps late)
	// since HeardAt: silence it could not have heard through, which the
	// deadlines do not count.
	stalled time.Duration
	// vouches are the largest counts of checks the peer's heartbeats
	// announced, by subject (vouch.go).
	vouches map[peer.ID]uint32
}

// PeerTable is the local view of the swarm's peers. It takes facts
// (heartbeats, connection events, discovery hints, pings) and turns them
// into a liveness verdict per peer. It is safe for concurrent use.
type PeerTable struct {
	mu       sync.Mutex
	self     peer.ID
	cfg      tableConfig
	now      func() time.Time
	peers    map[peer.ID]*entry
	buried   map[peer.ID]time.Time // forgotten peers: hints ignored until then
	rejects  map[peer.ID]*Rejections
	watchers map[int]chan Event
	nextW    int
	dropped  uint64
	changed  chan struct{} // closed at the next change; nil until asked for
}

func newPeerTable(self peer.ID, cfg tableConfig, now func() time.Time) *PeerTable {
	return &PeerTable{
		self:     self,
		cfg:      cfg,
		now:      now,
		peers:    make(map[peer.ID]*entry),
		buried:   make(map[peer.ID]time.Time),
		rejects:  make(map[peer.ID]*Rejections),
		watchers: make(map[int]chan Event),
	}
}

func (t *PeerTable) snapshot(e *entry) Peer {
	p := e.Peer
	p.Addrs = slices.Clone(e.Addrs)
	p.Direct = e.Connected && !e.connRelayed
	p.Relayed = e.connRelayed || (e.Heartbeat != nil && e.Heartbeat.Relayed())
	if r := t.rejects[e.ID]; r != nil {
		p.Rejected = *r
	}
	return p
}

// Get returns the row of id.
func (t *PeerTable) Get(id peer.ID) (Peer, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.peers[id]
	if !ok {
		return Peer{}, false
	}
	return t.snapshot(e), true
}

// Snapshot returns every row, sorted by peer ID.
func (t *PeerTable) Snapshot() []Peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Peer, 0, len(t.peers))
	for _, e := range t.peers {
		out = append(out, t.snapshot(e))
	}
	slices.SortFunc(out, func(a, b Peer) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out
}

// Live returns the rows that are Alive, sorted by peer ID.
func (t *PeerTable) Live() []Peer {
	all := t.Snapshot()
	out := all[:0]
	for _, p := range all {
		if p.Liveness == Alive {
			out = append(out, p)
		}
	}
	return out
}

// Len is the number of rows.
func (t *PeerTable) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.peers)
}

// Rejections returns the rejection counts of id, kept even for peers not
// in the table.
func (t *PeerTable) Rejections(id peer.ID) Rejections {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.rejects[id]; r != nil {
		return *r
	}
	return Rejections{}
}

// Watch returns a channel of table changes with room for buf events.
// Events that find it full are dropped (and counted by DroppedEvents): a
// slow watcher never stalls the table. Call stop to end the watch.
func (t *PeerTable) Watch(buf int) (events <-chan Event, stop func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ch := make(chan Event, max(buf, 1))
	id := t.nextW
	t.nextW++
	t.watchers[id] = ch
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			t.mu.Lock()
			delete(t.watchers, id)
			t.mu.Unlock()
			close(ch)
		})
	}
}

// Changed returns a channel that is closed at the table's next change: an
// accepted heartbeat, a liveness verdict, a connection opened or closed,
// a row forgotten. Unlike Watch it never drops anything and carries no
// detail: it is for waiters that look at the table again on any change
// (the entry's admission queue waits on it for KV room).
func (t *PeerTable) Changed() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.changed == nil {
		t.changed = make(chan struct{})
	}
	return t.changed
}

// bump wakes the Changed waiters; t.mu is held.
func (t *PeerTable) bump() {
	if t.changed != nil {
		close(t.changed)
		t.changed = nil
	}
}

// DroppedEvents is how many events found a watcher's channel full.
func (t *PeerTable) DroppedEvents() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dropped
}

func (t *PeerTable) emit(ev Event) {
	t.bump()
	for _, ch := range t.watchers {
		select {
		case ch <- ev:
		default:
			t.dropped++
		}
	}
}

func (t *PeerTable) setLiveness(e *entry, l Liveness, now time.Time) {
	if e.Liveness == l {
		return
	}
	t.emit(Event{Peer: e.ID, From: e.Liveness, To: l, At: now})
	e.Liveness, e.Since = l, now
}

func (t *PeerTable) get(id peer.ID, now time.Time) *entry {
	e := t.peers[id]
	if e == nil {
		e = &entry{Peer: Peer{ID: id, Liveness: Hint, Since: now}, touched: now}
		t.peers[id] = e
		delete(t.buried, id)
	}
	return e
}

// heard records an accepted heartbeat. It reports false, changing
// nothing, for a heartbeat no newer than the latest one accepted (a
// reordered or replayed message) or sent before the peer's connection
// closed (sentBeforeLoss).
func (t *PeerTable) heard(hb *Heartbeat) bool {
	if hb.NodeID == t.self {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if e := t.peers[hb.NodeID]; e != nil && !e.lastTS.IsZero() && (!hb.Timestamp.After(e.lastTS) || e.sentBeforeLoss(hb.Timestamp)) {
		return false
	}
	e := t.get(hb.NodeID, now)
	e.lastTS = hb.Timestamp
	e.Heartbeat = hb
	e.mergeVouches(hb.Vouches)
	e.HeardAt = now
	e.Heard++
	e.stalled = 0
	t.bump()
	t.setLiveness(e, Alive, now)
	return true
}

// sentBeforeLoss reports whether a heartbeat stamped ts, heard after
// the peer's last connection closed and before anything else was heard
// from it, was sent before that close: a copy the gossip mesh relayed
// late, which says nothing of whether the peer outlived its connection
// (a killed peer's last heartbeats would otherwise hold off its dead
// verdict until the silence deadline). The send time is measured on the
// peer's own clock from its latest heartbeat heard, so clock skew does
// not enter; that heartbeat's transit only makes the copy look later,
// which keeps the peer alive.
func (e *entry) sentBeforeLoss(ts time.Time) bool {
	if e.Connected || e.lostAt.IsZero() || !e.HeardAt.Before(e.lostAt) {
		return false
	}
	return e.HeardAt.Add(ts.Sub(e.lastTS)).Before(e.lostAt)
}

// hint records a peer found by discovery. Discovery keeps returning a
// dead peer for as long as its records last in the DHT (hours), so a hint
// neither keeps an entry alive nor brings back a peer forgotten less than
// a hint's lifetime ago: only a connection or a heartbeat does.
func (t *PeerTable) hint(ai peer.AddrInfo) {
	if ai.ID == t.self || ai.ID == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if until, ok := t.buried[ai.ID]; ok && now.Before(until) {
		return
	}
	e := t.get(ai.ID, now)
	for _, a := range ai.Addrs {
		if !slices.ContainsFunc(e.Addrs, a.Equal) {
			e.Addrs = append(e.Addrs, a)
		}
	}
	if len(e.Addrs) > 16 {
		e.Addrs = e.Addrs[len(e.Addrs)-16:]
	}
}

// setConn records whether we hold connections to id and whether all of
// them are relayed. Losing the last connection makes a live peer suspect
// at once and dead after the connection grace unless it is heard again.
func (t *PeerTable) setConn(id peer.ID, connected, relayed bool) {
	if id == t.self {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	e := t.peers[id]
	if e == nil {
		if !connected {
			return
		}
		e = t.get(id, now)
	}
	e.touched = now
	was := e.Connected
	e.Connected, e.connRelayed = connected, connected && relayed
	if was != connected {
		t.bump()
	}
	switch {
	case connected:
		e.lostAt = time.Time{}
	case was:
		e.lostAt = now
		if e.Liveness == Alive {
			t.setLiveness(e, Suspect, now)
		}
	}
}

// observeRTT folds one ping sample into id's smoothed RTT.
func (t *PeerTable) observeRTT(id peer.ID, sample time.Duration, alpha float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.peers[id]
	if e == nil || sample <= 0 {
		return
	}
	e.RTT = ewma(e.RTT, sample, alpha)
}

// observeBandwidth folds a probe's bytes per second into id's row.
func (t *PeerTable) observeBandwidth(id peer.ID, bw, alpha float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.peers[id]
	if e == nil || !(bw > 0) {
		return
	}
	if e.Bandwidth <= 0 {
		e.Bandwidth = bw
		return
	}
	e.Bandwidth = alpha*bw + (1-alpha)*e.Bandwidth
}

// reject counts a rejected message from id.
func (t *PeerTable) reject(id peer.ID, why rejectReason) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.rejects[id]
	if r == nil {
		if len(t.rejects) >= maxRejectPeers {
			id = ""
			r = t.rejects[id]
		}
		if r == nil {
			r = &Rejections{}
			t.rejects[id] = r
		}
	}
	r.add(why)
}

// stalled records that this process stopped for d (the sweep ran that
// much late): a stalled process reads no heartbeats, and after it they
// wait in its queues, so the stall is not counted as any peer's silence.
// A loaded machine (a VM stalled for seconds, a long GC pause) would
// otherwise declare every connected peer dead at once when it resumes.
func (t *PeerTable) stalled(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.peers {
		if e.Liveness == Alive || e.Liveness == Suspect {
			e.stalled += d
		}
	}
}

// sweep applies the deadlines: late peers become suspect, then dead, and
// dead peers and stale hints are forgotten.
func (t *PeerTable) sweep() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	c := t.cfg
	for id, until := range t.buried {
		if !now.Before(until) {
			delete(t.buried, id)
		}
	}
	for id, e := range t.peers {
		switch e.Liveness {
		case Alive, Suspect:
			silent := now.Sub(e.HeardAt) - e.stalled
			lost := !e.Connected && !e.lostAt.IsZero() && e.HeardAt.Before(e.lostAt) &&
				now.Sub(e.lostAt) >= c.connGrace
			switch {
			case silent >= c.deadAfter || lost:
				t.setLiveness(e, Dead, now)
			case silent >= c.suspectAfter:
				t.setLiveness(e, Suspect, now)
			}
		case Dead:
			if now.Sub(e.Since) >= c.forgetAfter {
				t.forget(id, e, now)
			}
		case Hint:
			if !e.Connected && now.Sub(e.touched) >= c.hintTTL {
				t.forget(id, e, now)
			}
		}
	}
}

// dropStranger removes the row of a peer that turned out to speak no
// Strata, unless it ever sent a heartbeat.
func (t *PeerTable) dropStranger(id peer.ID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.peers[id]
	if e == nil || !e.HeardAt.IsZero() {
		return
	}
	delete(t.peers, id)
	t.emit(Event{Peer: id, From: e.Liveness, Forgotten: true, At: t.now()})
}

func (t *PeerTable) forget(id peer.ID, e *entry, now time.Time) {
	delete(t.peers, id)
	t.buried[id] = now.Add(t.cfg.hintTTL)
	t.emit(Event{Peer: id, From: e.Liveness, Forgotten: true, At: now})
}
