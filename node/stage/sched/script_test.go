package sched

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratanet/strata/internal/scripttest"
)

// The scheduler's decisions are checked by scripts in testdata, in the
// style of consensus/testdata/leader: each script drives one stage (its
// KV room, admission queue, prefix cache and live sessions) with events
// and compares what it decided with the expected output under "----".
// Sequences are written as block labels (a,b,c: three blocks), hashed in
// a chain as routing.BlockHashes does. The format and -rewrite are
// internal/scripttest's.

func TestScripts(t *testing.T) {
	scripttest.Run(t, "testdata/*.txt", func(t *testing.T) scripttest.Do {
		w := &world{adm: Admission[string]{MaxQueue: 2}, live: map[string]*liveSess{}, t0: time.Unix(0, 0)}
		w.now = w.t0
		return w.do
	})
}

// scriptBlock is the scripts' block size in positions.
const scriptBlock = 4

// world is one stage as node/scheduler.go composes the decisions: KV
// room, the admission queue, the prefix cache (its values name the
// session that filled it) and the open sessions.
type world struct {
	room    int64
	timeout time.Duration
	adm     Admission[string]
	cache   Cache[string]
	live    map[string]*liveSess
	order   []string // live sessions in open order
	pending map[string]*liveSess
	t0, now time.Time
}

type liveSess struct {
	name     string
	from, to int
	labels   []string
	extra    int // positions past the whole blocks
	skip     int // blocks the first hop resumed (a later hop's open)
	need     int64
}

func (s *liveSess) tokens() int { return len(s.labels)*scriptBlock + s.extra }

// hashes chains the labels' hashes as routing.BlockHashes chains blocks'.
func hashes(labels []string) []uint64 {
	out := make([]uint64, len(labels))
	var prev uint64
	for i, l := range labels {
		h := fnv.New64a()
		fmt.Fprintf(h, "%d/%s", prev, l)
		prev = h.Sum64()
		out[i] = prev
	}
	return out
}

// args splits "k=v" words; the rest are positional.
func args(words []string) (pos []string, kv map[string]string) {
	kv = map[string]string{}
	for _, w := range words {
		if k, v, ok := strings.Cut(w, "="); ok {
			kv[k] = v
		} else {
			pos = append(pos, w)
		}
	}
	return pos, kv
}

func atoi(kv map[string]string, k string) (int, error) {
	v, ok := kv[k]
	if !ok {
		return 0, nil
	}
	return strconv.Atoi(v)
}

func hopOf(s string) (int, int, error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("hop %q: want FROM-TO", s)
	}
	from, err := strconv.Atoi(a)
	if err != nil {
		return 0, 0, err
	}
	to, err := strconv.Atoi(b)
	return from, to, err
}

func labelsOf(s string) []string {
	if s == "" || s == "-" {
		return nil
	}
	return strings.Split(s, ",")
}

func (w *world) do(line string) (string, error) {
	f := strings.Fields(line)
	pos, kv := args(f[1:])
	switch f[0] {
	case "room":
		n, err := strconv.ParseInt(pos[0], 10, 64)
		w.room = n
		return "", err
	case "queue":
		n, err := strconv.Atoi(kv["max"])
		if err != nil {
			return "", err
		}
		w.adm.MaxQueue = n
		d, err := time.ParseDuration(kv["timeout"])
		w.timeout = d
		return "", err
	case "open":
		return w.open(pos, kv)
	case "feed":
		s := w.live[pos[0]]
		if s == nil {
			return "", fmt.Errorf("no live session %s", pos[0])
		}
		s.labels = append(s.labels, labelsOf(pos[1])...)
		return "", nil
	case "close":
		return w.close(pos[0], kv["fail"] == "true"), nil
	case "tick":
		d, err := time.ParseDuration(pos[0])
		if err != nil {
			return "", err
		}
		w.now = w.now.Add(d)
		var out []string
		for _, x := range w.adm.Expire(w.now, w.timeout) {
			delete(w.pending, x.V)
			out = append(out, fmt.Sprintf("busy %s: waited %v", x.V, w.now.Sub(x.At)))
		}
		out = append(out, w.admit()...)
		return strings.Join(out, "\n"), nil
	case "release":
		from, to, err := hopOf(pos[0])
		if err != nil {
			return "", err
		}
		d := w.cache.DropLayers(func(l int) bool { return l >= from && l < to })
		return "dropped " + list(d), nil
	case "cache":
		return w.state(), nil
	case "batch":
		return batchScript(pos)
	}
	return "", fmt.Errorf("unknown command %q", f[0])
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, " ")
}

// open offers a session to admission and, admitted, decides its resume.
func (w *world) open(pos []string, kv map[string]string) (string, error) {
	from, to, err := hopOf(kv["hop"])
	if err != nil {
		return "", err
	}
	need, err := atoi(kv, "need")
	if err != nil {
		return "", err
	}
	extra, err := atoi(kv, "extra")
	if err != nil {
		return "", err
	}
	skip, err := atoi(kv, "skip")
	if err != nil {
		return "", err
	}
	s := &liveSess{name: pos[0], from: from, to: to, labels: labelsOf(kv["blocks"]), extra: extra, skip: skip, need: int64(need)}
	if w.pending == nil {
		w.pending = map[string]*liveSess{}
	}
	switch v := w.adm.Offer(s.name, s.need, w.room, w.now); v {
	case Open:
		return w.start(s), nil
	case Queue:
		w.pending[s.name] = s
		return fmt.Sprintf("queue %s (%d waiting)", s.name, w.adm.Waiting()), nil
	default:
		return fmt.Sprintf("%s %s", v, s.name), nil
	}
}

// start opens an admitted session: the resume decision, then the cache
// trimmed to what sessions leave (node/scheduler.go's open).
func (w *world) start(s *liveSess) string {
	first := s.from == 0
	hs := hashes(s.labels)
	limit := Limit(first, s.tokens(), s.skip*scriptBlock, scriptBlock)
	src, n := w.cache.Lookup(s.from, s.to, hs, limit)
	ms := []Match{{Blocks: n, Chains: n}}
	names := []string{"cache " + src}
	for _, name := range w.order {
		o := w.live[name]
		if o.from != s.from || o.to != s.to {
			continue
		}
		k := Shared(hashes(o.labels), hs)
		ms = append(ms, Match{Blocks: k, Chains: k})
		names = append(names, "live "+name)
	}
	i, blocks, miss := Resume(first, limit, s.skip, ms)
	if miss {
		return fmt.Sprintf("prefix-miss %s: does not hold the %d blocks the first hop resumed", s.name, s.skip)
	}
	w.adm.Reserve(s.need)
	w.live[s.name] = s
	w.order = append(w.order, s.name)
	out := fmt.Sprintf("open %s cold", s.name)
	if i >= 0 {
		w.cache.Resumed(blocks)
		out = fmt.Sprintf("open %s resumes %d blocks from %s", s.name, blocks, names[i])
	}
	if ev := w.cache.Trim(w.adm.Free(w.room)); len(ev) > 0 {
		out += "\nevict " + list(ev)
	}
	return out
}

// close ends a session: normally, its whole blocks go to the cache; then
// the cache is trimmed and waiting sessions open while memory allows.
func (w *world) close(name string, failed bool) string {
	s := w.live[name]
	if s == nil {
		return "no session " + name
	}
	delete(w.live, name)
	w.order = slices.DeleteFunc(w.order, func(n string) bool { return n == name })
	w.adm.Release(s.need)
	var out []string
	hs := hashes(s.labels)
	switch {
	case failed || len(hs) == 0:
	case w.cache.Holds(s.from, s.to, hs):
		out = append(out, "held already")
	default:
		d := w.cache.Add(s.from, s.to, hs, int64(len(hs)*scriptBlock*(s.to-s.from)), name)
		out = append(out, fmt.Sprintf("cache %s (%d blocks)", name, len(hs)))
		if len(d) > 0 {
			out = append(out, "replaces "+list(d))
		}
	}
	if ev := w.cache.Trim(w.adm.Free(w.room)); len(ev) > 0 {
		out = append(out, "evict "+list(ev))
	}
	out = append(out, w.admit()...)
	return strings.Join(out, "\n")
}

// admit opens waiting sessions, first come first served, while memory
// allows (node/scheduler.go's admitWaiting, after every loop turn).
func (w *world) admit() []string {
	var out []string
	for {
		h, ok := w.adm.Head()
		if !ok || !w.adm.Fits(h.Need, w.room) {
			return out
		}
		w.adm.Pop()
		p := w.pending[h.V]
		delete(w.pending, h.V)
		out = append(out, w.start(p))
	}
}

func (w *world) state() string {
	var out []string
	w.cache.Each(func(from, to int, hs []uint64, name string) {
		out = append(out, fmt.Sprintf("%s: [%d,%d) %d blocks", name, from, to, len(hs)))
	})
	out = append(out, fmt.Sprintf("cost %d, free %d, used %d, waiting %d; hits %d, reused %d blocks, evicted %d",
		w.cache.Cost(), w.adm.Free(w.room), w.adm.Used(), w.adm.Waiting(), w.cache.Hits, w.cache.Reused, w.cache.Evicted))
	return strings.Join(out, "\n")
}

// batchScript: each word is a ready step, SESSION:LO/STAGE,LO/STAGE...
// (its hop's segments). Steps of a session already in the batch wait;
// the rest are planned.
func batchScript(steps []string) (string, error) {
	var b Batch[string]
	var run, deferred []string
	var segs [][]Seg
	for _, st := range steps {
		name, spec, _ := strings.Cut(st, ":")
		if b.Has(name) {
			deferred = append(deferred, name)
			continue
		}
		b.Add(name)
		var ss []Seg
		for _, p := range strings.Split(spec, ",") {
			lo, stage, ok := strings.Cut(p, "/")
			if !ok {
				return "", fmt.Errorf("segment %q: want LO/STAGE", p)
			}
			l, err := strconv.Atoi(lo)
			if err != nil {
				return "", err
			}
			id, err := strconv.Atoi(stage)
			if err != nil {
				return "", err
			}
			ss = append(ss, Seg{Lo: l, Stage: id})
		}
		run = append(run, name)
		segs = append(segs, ss)
	}
	out := []string{"run " + list(run), "defer " + list(deferred)}
	for _, g := range Plan(segs) {
		var who []string
		for _, i := range g.Steps {
			who = append(who, run[i])
		}
		out = append(out, fmt.Sprintf("layer %d stage %d: %s", g.Lo, g.Stage, strings.Join(who, " ")))
	}
	return strings.Join(out, "\n"), nil
}
