package testnet

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/stratanet/strata/consensus"
)

// The history checker: the committed layer maps of a run must form one
// linearizable history. Every member logs each committed map it folds in
// (consensus.LogMapApplied, with epoch, Raft index, hash and time) and
// each state it restores from a snapshot (consensus.LogMapRestored); the
// runner parses those lines from every node's log, one sequence per
// process life, and adds its own polls of /v1/swarm as reads. Two checks
// then run on the same operations:
//
//   - the direct one: no epoch has two different maps, no Raft index two
//     different records, every life applies epochs in increasing order
//     and skips no committed map (except by restoring a snapshot), and
//     every poll reads a map some member applied, never going back on
//     one node;
//   - Porcupine's linearizability check, with the committed maps
//     modelled as one append-only log (mapLogModel): an apply is legal
//     only as the next entry of its life, appending when it is the
//     first to reach that position, and a read only of an entry at or
//     past what its node had applied.
//
// Times: a node's log line carries the wall clock of the same machine
// the runner reads, so the runner's and the nodes' times compare. An
// apply happens after the life's previous line and before its own, so
// its operation spans that interval.

// Kinds of MapOp.
const (
	OpApply   = "apply"
	OpRestore = "restore"
	OpRead    = "read"
)

// MapOp is one operation on the committed-map history.
type MapOp struct {
	Node  string `json:"node"`
	Life  int    `json:"life"` // 1 for the node's first process, 2 after its first restart...
	Kind  string `json:"kind"`
	Epoch uint64 `json:"epoch"`
	Hash  string `json:"hash"`
	Index uint64 `json:"index,omitempty"` // apply: the Raft index
	// Call and Return bound when the operation took effect.
	Call   time.Time `json:"call"`
	Return time.Time `json:"return"`
}

func (o MapOp) life() string { return fmt.Sprintf("%s#%d", o.Node, o.Life) }

func (o MapOp) String() string {
	return fmt.Sprintf("%s %s epoch %d map %s", o.life(), o.Kind, o.Epoch, o.Hash)
}

// HistoryVerdict is the checker's outcome.
type HistoryVerdict struct {
	// Linearizable: both checks passed.
	Linearizable bool `json:"linearizable"`
	// Porcupine is its result: "ok", "illegal" or "unknown" (it ran out
	// of time).
	Porcupine string   `json:"porcupine"`
	Maps      int      `json:"maps"` // distinct committed maps applied
	Epochs    []uint64 `json:"epochs"`
	Lives     int      `json:"lives"`
	Applies   int      `json:"applies"`
	Restores  int      `json:"restores"`
	Reads     int      `json:"reads"`
	// Violations are the direct check's findings (and Porcupine's, when
	// it found the history illegal); empty when Linearizable.
	Violations []string `json:"violations,omitempty"`
}

// ErrNoHistory: a node's log holds no applied-map line at all, so there
// is nothing to check (a binary from before the log existed).
var ErrNoHistory = errors.New("history: no applied-map lines")

// logLine is the part of an applied-map log line the checker reads.
type logLine struct {
	Msg   string `json:"msg"`
	Epoch uint64 `json:"epoch"`
	Index uint64 `json:"index"`
	Hash  string `json:"hash"`
	AtUS  int64  `json:"at_us"`
}

// parseNodeLog reads one node's log file: lives are separated by the
// runner's "=== testnet: start N:" lines, and starts[k] is when life k+1
// began (its first operation's Call).
func parseNodeLog(path, node string, starts []time.Time) ([]MapOp, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	return parseNodeLines(bufio.NewScanner(f), node, starts)
}

func parseNodeLines(sc *bufio.Scanner, node string, starts []time.Time) ([]MapOp, error) {
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var (
		out  []MapOp
		life int
		prev time.Time
	)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "=== testnet: start ") {
			life++
			prev = time.Time{}
			if life <= len(starts) {
				prev = starts[life-1]
			}
			continue
		}
		l, ok := parseMapLine(line)
		if !ok {
			continue
		}
		kind := OpApply
		if l.Msg == consensus.LogMapRestored {
			kind = OpRestore
		}
		at := time.UnixMicro(l.AtUS)
		// After the life's previous line (strictly, so that a life's own
		// operations never overlap), before its own.
		call := prev.Add(time.Nanosecond)
		if prev.IsZero() || !call.Before(at) {
			call = at.Add(-time.Nanosecond)
		}
		out = append(out, MapOp{Node: node, Life: max(life, 1), Kind: kind, Epoch: l.Epoch, Hash: l.Hash, Index: l.Index,
			Call: call, Return: at})
		prev = at
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("history: %s's log: %w", node, err)
	}
	return out, nil
}

// parseMapLine recognizes an applied-map line in either of the node's
// log formats: the console one (time, level, logger, caller, message,
// then the fields as one JSON object) or JSON (one object a line).
func parseMapLine(line string) (logLine, bool) {
	var l logLine
	var obj string
	switch {
	case strings.HasPrefix(line, "{"):
		obj = line
	default:
		i := strings.Index(line, "\t"+consensus.LogMapApplied+"\t{")
		msg := consensus.LogMapApplied
		if i < 0 {
			i = strings.Index(line, "\t"+consensus.LogMapRestored+"\t{")
			msg = consensus.LogMapRestored
		}
		if i < 0 {
			return l, false
		}
		obj = line[i+len(msg)+2:]
		l.Msg = msg
	}
	msg := l.Msg
	if err := json.Unmarshal([]byte(obj), &l); err != nil {
		return l, false
	}
	if msg != "" {
		l.Msg = msg
	}
	if (l.Msg != consensus.LogMapApplied && l.Msg != consensus.LogMapRestored) || l.Hash == "" || l.AtUS == 0 {
		return l, false
	}
	return l, true
}

// maxViolations caps the findings listed: one bug repeats on every node.
const maxViolations = 20

// CheckHistory runs both checks on ops (applies, restores and reads, in
// any order); timeout bounds Porcupine.
func CheckHistory(ops []MapOp, timeout time.Duration) HistoryVerdict {
	var v HistoryVerdict
	lives := map[string][]MapOp{}
	var reads []MapOp
	for _, o := range ops {
		switch o.Kind {
		case OpApply, OpRestore:
			lives[o.life()] = append(lives[o.life()], o)
			if o.Kind == OpApply {
				v.Applies++
			} else {
				v.Restores++
			}
		case OpRead:
			reads = append(reads, o)
			v.Reads++
		default:
			v.Violations = append(v.Violations, fmt.Sprintf("unknown operation kind %q", o.Kind))
		}
	}
	v.Lives = len(lives)
	said := map[string]bool{}
	bad := func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !said[msg] {
			said[msg] = true
			v.Violations = append(v.Violations, msg)
		}
	}

	// One map per epoch, one record per index, everywhere.
	byEpoch := map[uint64]MapOp{}
	byIndex := map[uint64]MapOp{}
	seen := map[mapEntry]bool{} // conflicts reported, once per map
	for _, o := range ops {
		if o.Epoch == 0 {
			continue // nothing committed yet (a restore of an empty state)
		}
		if first, ok := byEpoch[o.Epoch]; ok && first.Hash != o.Hash {
			if e := (mapEntry{o.Epoch, o.Hash}); !seen[e] {
				seen[e] = true
				bad("epoch %d has two maps: %s (%s %s) and %s (%s %s)", o.Epoch, first.Hash, first.life(), first.Kind, o.Hash, o.life(), o.Kind)
			}
		} else if !ok && o.Kind != OpRead {
			byEpoch[o.Epoch] = o
		}
		if o.Kind == OpApply {
			if first, ok := byIndex[o.Index]; ok && (first.Epoch != o.Epoch || first.Hash != o.Hash) {
				bad("raft index %d applied as epoch %d map %s by %s and as epoch %d map %s by %s",
					o.Index, first.Epoch, first.Hash, first.life(), o.Epoch, o.Hash, o.life())
			} else if !ok {
				byIndex[o.Index] = o
			}
		}
	}
	seq := slices.Sorted(maps.Keys(byEpoch))
	v.Epochs, v.Maps = seq, len(seq)
	pos := map[uint64]int{}
	for i, e := range seq {
		pos[e] = i
	}

	// Each life: increasing epochs, no committed map skipped.
	for _, name := range slices.Sorted(maps.Keys(lives)) {
		l := lives[name]
		sort.SliceStable(l, func(i, j int) bool { return l[i].Return.Before(l[j].Return) })
		at := -1 // position in seq of the life's latest map (-1: none yet)
		for _, o := range l {
			p, known := pos[o.Epoch]
			if o.Epoch == 0 {
				p, known = -1, true
			}
			if !known {
				continue // already reported as a conflict
			}
			switch o.Kind {
			case OpApply:
				if p != at+1 {
					if p <= at {
						bad("%s applied epoch %d after epoch %d: epochs go backwards or repeat", name, o.Epoch, seq[at])
					} else {
						bad("%s applied epoch %d but never epoch %d before it: a committed map skipped", name, o.Epoch, seq[at+1])
					}
				}
			case OpRestore:
				if p < at {
					bad("%s restored epoch %d after applying epoch %d: a snapshot went back", name, o.Epoch, seq[at])
				}
			}
			at = max(at, p)
		}
	}

	// Reads: a map someone applied, never older than one read before
	// from the same life.
	slices.SortStableFunc(reads, func(a, b MapOp) int { return a.Call.Compare(b.Call) })
	lastRead := map[string]MapOp{}
	for _, o := range reads {
		if o.Epoch == 0 {
			continue
		}
		if _, ok := pos[o.Epoch]; !ok {
			bad("%s read epoch %d map %s, which no member applied", o.life(), o.Epoch, o.Hash)
			continue
		}
		if prev, ok := lastRead[o.life()]; ok && o.Epoch < prev.Epoch && !o.Call.Before(prev.Return) {
			bad("%s read epoch %d after reading epoch %d: its committed map went back", o.life(), o.Epoch, prev.Epoch)
		}
		lastRead[o.life()] = o
	}

	v.Porcupine = checkPorcupine(ops, timeout)
	if v.Porcupine == "illegal" {
		bad("porcupine: the applied maps and reads have no linearization as one append-only log")
	}
	v.Linearizable = len(v.Violations) == 0 && v.Porcupine == "ok"
	if n := len(v.Violations); n > maxViolations {
		v.Violations = append(v.Violations[:maxViolations], fmt.Sprintf("... and %d more", n-maxViolations))
	}
	return v
}

// The Porcupine model of the committed maps: one append-only log of
// (epoch, hash) entries, and for each process life how far it applied
// and what it last read.

type mapEntry struct {
	Epoch uint64
	Hash  string
}

type mapLogState struct {
	log  []mapEntry
	cur  map[string]int // life: entries applied (its next position)
	read map[string]int // life: position of its latest read + 1
}

type mapLogInput struct {
	Life  string
	Kind  string
	Entry mapEntry
}

func (s mapLogState) find(e mapEntry) int {
	for i, x := range s.log {
		if x.Epoch == e.Epoch {
			if x.Hash != e.Hash {
				return -2
			}
			return i
		}
	}
	return -1
}

func (s mapLogState) with(life string, cur, read int, appended *mapEntry) mapLogState {
	n := mapLogState{log: s.log, cur: maps.Clone(s.cur), read: maps.Clone(s.read)}
	if appended != nil {
		n.log = append(slices.Clip(slices.Clone(s.log)), *appended)
	}
	if cur >= 0 {
		n.cur[life] = cur
	}
	if read >= 0 {
		n.read[life] = read
	}
	return n
}

func mapLogStep(state, input, _ any) (bool, any) {
	s := state.(mapLogState)
	in := input.(mapLogInput)
	if in.Entry.Epoch == 0 {
		return true, s // nothing committed yet: constrains nothing
	}
	last := uint64(0)
	if n := len(s.log); n > 0 {
		last = s.log[n-1].Epoch
	}
	p := s.find(in.Entry)
	switch in.Kind {
	case OpApply:
		c := s.cur[in.Life]
		if c < len(s.log) {
			return s.log[c] == in.Entry, s.with(in.Life, c+1, -1, nil)
		}
		if p != -1 || in.Entry.Epoch <= last {
			return false, s
		}
		e := in.Entry
		return true, s.with(in.Life, c+1, -1, &e)
	case OpRestore:
		c := s.cur[in.Life]
		switch {
		case p == -2:
			return false, s
		case p >= 0:
			return p+1 >= c, s.with(in.Life, p+1, -1, nil)
		case in.Entry.Epoch > last:
			// The snapshot holds a map whose apply no line recorded (its
			// life ended before the line was written): it comes next.
			e := in.Entry
			return true, s.with(in.Life, len(s.log)+1, -1, &e)
		}
		return false, s
	case OpRead:
		if p < 0 {
			return false, s
		}
		// A node routes on the newer of its replica and the leader's
		// notices: never older than what it applied or read before.
		return p+1 >= s.cur[in.Life] && p+1 >= s.read[in.Life], s.with(in.Life, -1, p+1, nil)
	}
	return false, s
}

func mapLogEqual(a, b any) bool {
	x, y := a.(mapLogState), b.(mapLogState)
	return slices.Equal(x.log, y.log) && maps.Equal(x.cur, y.cur) && maps.Equal(x.read, y.read)
}

func mapLogHash(state any) uint64 {
	s := state.(mapLogState)
	h := fnv.New64a()
	fmt.Fprint(h, len(s.log))
	if n := len(s.log); n > 0 {
		fmt.Fprint(h, s.log[n-1].Hash)
	}
	for _, k := range slices.Sorted(maps.Keys(s.cur)) {
		fmt.Fprint(h, k, s.cur[k])
	}
	for _, k := range slices.Sorted(maps.Keys(s.read)) {
		fmt.Fprint(h, k, s.read[k])
	}
	return h.Sum64()
}

var mapLogModel = porcupine.Model{
	Init:  func() any { return mapLogState{cur: map[string]int{}, read: map[string]int{}} },
	Step:  mapLogStep,
	Equal: mapLogEqual,
	Hash:  mapLogHash,
	DescribeOperation: func(input, _ any) string {
		in := input.(mapLogInput)
		return fmt.Sprintf("%s %s %d/%s", in.Life, in.Kind, in.Entry.Epoch, in.Entry.Hash)
	},
}

// checkPorcupine runs Porcupine on ops: "ok", "illegal" or "unknown".
func checkPorcupine(ops []MapOp, timeout time.Duration) string {
	lifeID := map[string]int{}
	hist := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		id, ok := lifeID[o.life()]
		if !ok {
			id = len(lifeID)
			lifeID[o.life()] = id
		}
		call, ret := o.Call.UnixNano(), o.Return.UnixNano()
		if ret <= call {
			call = ret - 1
		}
		hist = append(hist, porcupine.Operation{ClientId: id, Call: call, Return: ret,
			Input: mapLogInput{Life: o.life(), Kind: o.Kind, Entry: mapEntry{Epoch: o.Epoch, Hash: o.Hash}}})
	}
	switch porcupine.CheckOperationsTimeout(mapLogModel, hist, timeout) {
	case porcupine.Ok:
		return "ok"
	case porcupine.Illegal:
		return "illegal"
	}
	return "unknown"
}
