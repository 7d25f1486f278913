// Package grammar constrains generation to a language: JSON documents
// valid against a JSON schema, or a model family's tool call with
// arguments valid against the tool's parameters.
//
// A Grammar is a context-free grammar over bytes (rules of alternatives
// of sequences of byte classes and rule references, as llama.cpp's GBNF)
// compiled from a Spec. A Matcher runs it as a pushdown automaton whose
// state is the set of parse stacks alive after the bytes so far; Mask
// says which tokens of a vocabulary may come next: a token is allowed
// when its whole byte string can be consumed from the current state, and
// an end token only when the document is complete. Everything is a pure
// function of the spec, the vocabulary and the tokens so far, so any
// node that replays a generation masks the same tokens.
package grammar

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
)

// ErrUnsupported is a schema or spec the grammar cannot express.
var ErrUnsupported = errors.New("grammar: unsupported")

// ErrRejected is a token or byte the grammar does not allow here.
var ErrRejected = errors.New("grammar: rejected")

// ErrTooLarge is a grammar past the size bound.
var ErrTooLarge = errors.New("grammar: too large")

// maxElems bounds a compiled grammar, so that a hostile schema (huge
// maxLength, deep nesting of bounded repeats) costs bounded memory and
// compile time (about 0.2 s at the bound on one core; the last hop
// compiles a spec once, in its scheduler loop, then caches it).
const maxElems = 1 << 17

// element kinds.
const (
	kEnd  = iota // end of an alternative
	kByte        // one byte of a class
	kRef         // a rule
)

type elem struct {
	kind uint8
	ref  int32 // kRef: the rule; kByte: the class
}

// class is a set of bytes.
type class [4]uint64

func (c *class) has(b byte) bool { return c[b>>6]&(1<<(b&63)) != 0 }
func (c *class) add(lo, hi byte) {
	for b := int(lo); b <= int(hi); b++ {
		c[b>>6] |= 1 << (b & 63)
	}
}

// Grammar is a compiled grammar. It is immutable and safe for concurrent
// use; Matchers hold the per-generation state.
type Grammar struct {
	elems   []elem
	classes []class
	rules   [][]int32 // rule → the start (elems index) of each alternative
	root    int32
	// closure[p] are the stacks (relative paths) an element position
	// expands to: precomputed so that advancing never walks rules.
	closure [][]path
}

// masks caches masks by grammar, vocabulary and state (stateKey): a
// state recurs within a document (every character of a string) and
// across documents of the same grammar (CompileCached shares it).
var masks struct {
	sync.Mutex
	m     map[maskKey][]uint64
	bytes int
}

type maskKey struct {
	g     *Grammar
	v     *Vocab
	state string
}

// maxMaskBytes bounds the mask cache (a mask is a bit per token: 4 KB
// for 32000 tokens); past it, the cache starts over.
const maxMaskBytes = 64 << 20

// path is one way position p expands: the positions pushed (bottom
// first; the last one is a byte element), or, with end set, that p can
// complete without consuming a byte, after pushing push (never: see
// expand).
type path struct {
	push []int32 // bottom first; the last is a kByte position
	end  bool    // p's rule can end here (nothing pushed)
}

// builder assembles rules.
type builder struct {
	g       *Grammar
	classes map[class]int32
	lits    map[string]int32 // literal rules, shared
	err     error
	// Rules every schema of the grammar shares (-1 until built):
	// whitespace, a string character, any string, number and integer,
	// any value and any object.
	ws, char, str, num, integer, anyValue, anyObject int32
}

func newBuilder() *builder {
	return &builder{g: &Grammar{}, classes: map[class]int32{}, lits: map[string]int32{},
		ws: -1, char: -1, str: -1, num: -1, integer: -1, anyValue: -1, anyObject: -1}
}

// item is a sequence element while building: a byte class or a rule.
type item struct {
	rule int32 // -1: a class
	cls  class
}

func cls(lo, hi byte) item {
	var c class
	c.add(lo, hi)
	return item{rule: -1, cls: c}
}

func set(s string) item {
	var c class
	for i := 0; i < len(s); i++ {
		c.add(s[i], s[i])
	}
	return item{rule: -1, cls: c}
}

func ref(r int32) item { return item{rule: r} }

// newRule reserves a rule, for recursion; define sets its alternatives.
func (b *builder) newRule() int32 {
	b.g.rules = append(b.g.rules, nil)
	return int32(len(b.g.rules) - 1)
}

func (b *builder) define(r int32, alts ...[]item) {
	starts := make([]int32, 0, len(alts))
	for _, a := range alts {
		starts = append(starts, int32(len(b.g.elems)))
		for _, it := range a {
			if it.rule >= 0 {
				b.g.elems = append(b.g.elems, elem{kind: kRef, ref: it.rule})
				continue
			}
			id, ok := b.classes[it.cls]
			if !ok {
				id = int32(len(b.g.classes))
				b.g.classes = append(b.g.classes, it.cls)
				b.classes[it.cls] = id
			}
			b.g.elems = append(b.g.elems, elem{kind: kByte, ref: id})
		}
		b.g.elems = append(b.g.elems, elem{kind: kEnd})
	}
	if len(b.g.elems) > maxElems && b.err == nil {
		b.err = fmt.Errorf("%w: over %d grammar elements", ErrTooLarge, maxElems)
	}
	b.g.rules[r] = starts
}

func (b *builder) rule(alts ...[]item) int32 {
	r := b.newRule()
	b.define(r, alts...)
	return r
}

func seq(items ...item) []item { return items }

// lit is a rule matching s exactly.
func (b *builder) lit(s string) item {
	if r, ok := b.lits[s]; ok {
		return ref(r)
	}
	a := make([]item, len(s))
	for i := 0; i < len(s); i++ {
		a[i] = set(s[i : i+1])
	}
	r := b.rule(a)
	b.lits[s] = r
	return ref(r)
}

// star is x*, right-recursive (the matcher's stacks stay flat: a
// reference in last place is not pushed).
func (b *builder) star(x item) item {
	r := b.newRule()
	b.define(r, seq(x, ref(r)), seq())
	return ref(r)
}

// upTo is x{0,n}: nested optionals, n rules.
func (b *builder) upTo(x item, n int) item {
	r := b.rule(seq())
	for i := 0; i < n && b.err == nil; i++ {
		r = b.rule(seq(x, ref(r)), seq())
	}
	return ref(r)
}

// repeat is x{lo,hi}; hi < 0: unbounded.
func (b *builder) repeat(x item, lo, hi int) item {
	var tail item
	if hi < 0 {
		tail = b.star(x)
	} else {
		tail = b.upTo(x, hi-lo)
	}
	a := make([]item, 0, lo+1)
	for i := 0; i < lo; i++ {
		a = append(a, x)
	}
	return ref(b.rule(append(a, tail)))
}

// finish computes the closures and checks the grammar.
func (b *builder) finish(root int32) (*Grammar, error) {
	if b.err != nil {
		return nil, b.err
	}
	g := b.g
	g.root = root
	g.closure = make([][]path, len(g.elems))
	state := make([]uint8, len(g.elems)) // 0 new, 1 in progress, 2 done
	var visit func(p int32) error
	visit = func(p int32) error {
		switch state[p] {
		case 2:
			return nil
		case 1:
			return fmt.Errorf("%w: left recursion", ErrUnsupported)
		}
		state[p] = 1
		var out []path
		e := g.elems[p]
		switch e.kind {
		case kEnd:
			out = []path{{end: true}}
		case kByte:
			out = []path{{push: []int32{p}}}
		case kRef:
			// After the reference: p+1, unless it is the end (a tail
			// call: nothing to come back to).
			tail := g.elems[p+1].kind == kEnd
			for _, a := range g.rules[e.ref] {
				if err := visit(a); err != nil {
					return err
				}
				for _, c := range g.closure[a] {
					if !c.end {
						push := c.push
						if !tail {
							push = append([]int32{p + 1}, c.push...)
						}
						out = append(out, path{push: push})
						continue
					}
					// The rule can be empty: continue after the reference.
					if tail {
						out = append(out, path{end: true})
						continue
					}
					if err := visit(p + 1); err != nil {
						return err
					}
					out = append(out, g.closure[p+1]...)
				}
			}
		}
		if len(out) > 4096 {
			return fmt.Errorf("%w: an ambiguous grammar (%d expansions of one position)", ErrTooLarge, len(out))
		}
		g.closure[p] = out
		state[p] = 2
		return nil
	}
	for p := range g.elems {
		if err := visit(int32(p)); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Matcher is a generation's position in a grammar. Not safe for
// concurrent use.
type Matcher struct {
	g *Grammar
	// The stacks: frames in an arena, each stack its top frame's index;
	// -1 is the empty stack (the document is complete).
	frames []frame
	stacks []int32
	// scratch for Mask.
	buf []int32
	// ambiguous: a step passed maxStacks.
	ambiguous bool
}

type frame struct {
	pos  int32 // a kByte position, or (below the top) where to go on
	next int32 // -1: the bottom
}

// NewMatcher starts a document.
func (g *Grammar) NewMatcher() *Matcher {
	m := &Matcher{g: g}
	m.stacks = m.expand(m.stacks[:0], -1, g.rules[g.root])
	return m
}

// push adds the positions (bottom first) over rest.
func (m *Matcher) push(rest int32, ps []int32) int32 {
	for _, p := range ps {
		m.frames = append(m.frames, frame{pos: p, next: rest})
		rest = int32(len(m.frames) - 1)
	}
	return rest
}

// expand appends to out the stacks of the alternatives starting at
// starts, over rest.
func (m *Matcher) expand(out []int32, rest int32, starts []int32) []int32 {
	base := len(out)
	for _, a := range starts {
		out = m.expandAt(out, base, rest, a)
	}
	return out
}

// expandAt appends the stacks of position p over rest: each leaves a byte
// element on top, or pops to rest's continuation when p can end.
// Stacks from out[base:] on are this expansion's: an equal one is not
// added twice.
func (m *Matcher) expandAt(out []int32, base int, rest int32, p int32) []int32 {
	for _, c := range m.g.closure[p] {
		if !c.end {
			s := m.push(rest, c.push)
			out = m.appendUniq(out, base, s)
			continue
		}
		if rest < 0 {
			out = m.appendUniq(out, base, -1)
			continue
		}
		f := m.frames[rest]
		out = m.expandAt(out, base, f.next, f.pos)
	}
	return out
}

// appendUniq appends s unless an equal stack is in out[base:]: the same
// top position over the same rest.
func (m *Matcher) appendUniq(out []int32, base int, s int32) []int32 {
	for _, o := range out[base:] {
		if o == s || o >= 0 && s >= 0 && m.frames[o] == m.frames[s] {
			return out
		}
	}
	return append(out, s)
}

// step advances the stacks in from over byte c, appending the survivors
// to out.
func (m *Matcher) step(out, from []int32, c byte) []int32 {
	g := m.g
	base := len(out)
	for _, s := range from {
		if s < 0 {
			continue
		}
		f := m.frames[s]
		if !g.classes[g.elems[f.pos].ref].has(c) {
			continue
		}
		out = m.expandAt(out, base, f.next, f.pos+1)
	}
	if len(out)-base > maxStacks {
		m.ambiguous = true
		return out[:base]
	}
	return out
}

// maxStacks bounds the parses alive at once: an ambiguous grammar (an
// anyOf of many schemas that agree for long) would cost its work times
// that many on every byte of every token. Past it the matcher refuses,
// with ErrTooLarge.
const maxStacks = 256

var errAmbiguous = fmt.Errorf("%w: over %d parses alive at once (an anyOf of schemas too alike)", ErrTooLarge, maxStacks)

// Done reports whether the bytes so far are a complete document.
func (m *Matcher) Done() bool {
	for _, s := range m.stacks {
		if s < 0 {
			return true
		}
	}
	return false
}

// Dead reports whether no byte can continue the document (it is complete
// and nothing may follow).
func (m *Matcher) Dead() bool {
	for _, s := range m.stacks {
		if s >= 0 {
			return false
		}
	}
	return true
}

// Advance consumes bytes; a byte the grammar refuses is ErrRejected and
// leaves the matcher unchanged.
func (m *Matcher) Advance(b []byte) error {
	mark := len(m.frames)
	cur := m.stacks
	var next []int32
	m.ambiguous = false
	for i, c := range b {
		next = m.step(nil, cur, c)
		if len(next) == 0 {
			m.frames = m.frames[:mark]
			if m.ambiguous {
				return errAmbiguous
			}
			return fmt.Errorf("%w: byte %q at offset %d", ErrRejected, c, i)
		}
		cur = next
	}
	m.stacks = cur
	m.compact()
	return nil
}

// compact copies the live stacks into a fresh arena when the old one
// holds mostly garbage.
func (m *Matcher) compact() {
	if len(m.frames) < 4096 {
		return
	}
	old := m.frames
	m.frames = make([]frame, 0, 256)
	moved := map[int32]int32{}
	var cp func(s int32) int32
	cp = func(s int32) int32 {
		if s < 0 {
			return s
		}
		if n, ok := moved[s]; ok {
			return n
		}
		f := old[s]
		f.next = cp(f.next)
		m.frames = append(m.frames, f)
		n := int32(len(m.frames) - 1)
		moved[s] = n
		return n
	}
	for i, s := range m.stacks {
		m.stacks[i] = cp(s)
	}
}

// Vocab is a vocabulary as the mask sees it: each token's bytes, sorted
// so that tokens sharing a prefix share its work, and the end tokens.
// Build it once per model.
type Vocab struct {
	n     int
	bytes [][]byte
	ends  []int32
	// Tokens by kind, each sorted by bytes with the common prefix with
	// the one before (so that tokens sharing a prefix share its work):
	// plain ones are printable ASCII but the quote and the backslash
	// (most of a vocabulary, and what a JSON string's body is made of),
	// others the rest.
	plain, other tokenList
	maxPlain     int // the longest plain token
}

type tokenList struct {
	order  []int32
	lcp    []int32
	maxLen int
}

func isPlain(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// NewVocab indexes token bytes (an empty one is never allowed: it would
// let a document stall) and the tokens that end a generation, allowed
// only where the document is complete.
func NewVocab(pieces [][]byte, ends []int32) *Vocab {
	v := &Vocab{n: len(pieces), bytes: pieces, ends: ends}
	for id, p := range pieces {
		switch {
		case len(p) == 0 || slices.Contains(ends, int32(id)):
		case isPlain(p):
			v.plain.order = append(v.plain.order, int32(id))
			v.maxPlain = max(v.maxPlain, len(p))
		default:
			v.other.order = append(v.other.order, int32(id))
		}
	}
	v.plain.sort(pieces)
	v.other.sort(pieces)
	return v
}

func (l *tokenList) sort(pieces [][]byte) {
	slices.SortFunc(l.order, func(a, b int32) int { return bytes.Compare(pieces[a], pieces[b]) })
	l.lcp = make([]int32, len(l.order))
	for i, id := range l.order {
		l.maxLen = max(l.maxLen, len(pieces[id]))
		if i == 0 {
			continue
		}
		a, b := pieces[l.order[i-1]], pieces[id]
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		l.lcp[i] = int32(n)
	}
}

// Size is the number of tokens.
func (v *Vocab) Size() int { return v.n }

// Bytes is token id's bytes.
func (v *Vocab) Bytes(id int32) []byte {
	if id < 0 || int(id) >= v.n {
		return nil
	}
	return v.bytes[id]
}

// IsEnd reports whether id ends a generation.
func (v *Vocab) IsEnd(id int32) bool { return slices.Contains(v.ends, id) }

// Mask sets in allowed (a bitset of v.Size() bits) the tokens that may
// come next, and returns how many there are. A state seen before (with
// this vocabulary) answers from the grammar's cache.
func (m *Matcher) Mask(v *Vocab, allowed []uint64) int {
	key := maskKey{m.g, v, m.stateKey(m.stacks)}
	masks.Lock()
	cached, ok := masks.m[key]
	masks.Unlock()
	if ok {
		copy(allowed, cached)
		return popcount(allowed)
	}
	m.ambiguous = false
	n := m.mask(v, allowed)
	if m.ambiguous {
		return n // not cached: Apply refuses it
	}
	size := 8*len(allowed) + len(key.state)
	masks.Lock()
	if masks.m == nil || masks.bytes+size > maxMaskBytes {
		masks.m, masks.bytes = map[maskKey][]uint64{}, 0
	}
	masks.m[key] = slices.Clone(allowed)
	masks.bytes += size
	masks.Unlock()
	return n
}

func popcount(b []uint64) int {
	n := 0
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return n
}

// stateKey is a canonical form of a set of stacks: each stack's
// positions top to bottom, the stacks sorted, so that equal states built
// from different frames have equal keys.
func (m *Matcher) stateKey(stacks []int32) string {
	keys := make([]string, 0, len(stacks))
	var b []byte
	for _, s := range stacks {
		b = b[:0]
		for f := s; f >= 0; f = m.frames[f].next {
			b = binary.LittleEndian.AppendUint32(b, uint32(m.frames[f].pos))
		}
		keys = append(keys, string(b))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	var out []byte
	for _, k := range keys {
		out = binary.LittleEndian.AppendUint32(out, uint32(len(k)))
		out = append(out, k...)
	}
	return string(out)
}

// plainChain follows the state through plain bytes while every plain
// byte leads to the same state (as inside a string): chain[k] is the
// state after any k plain bytes. fixed: the state after one more is the
// same as after k (an unbounded string), so every longer run is alive;
// dead: the chain ends because no plain byte continues it, so longer
// runs are refused. Otherwise the plain bytes diverge at len(chain)-1.
func (m *Matcher) plainChain(maxLen int) (chain [][]int32, fixed, dead bool) {
	cur := m.stacks
	chain = append(chain, cur)
	curKey := m.stateKey(cur)
	for len(chain) <= maxLen {
		next := m.step(nil, cur, 'a')
		nextKey := m.stateKey(next)
		for c := byte(0x20); c <= 0x7e; c++ {
			if c == 'a' || c == '"' || c == '\\' {
				continue
			}
			if m.stateKey(m.step(nil, cur, c)) != nextKey {
				return chain, false, false
			}
		}
		if len(next) == 0 {
			return chain, false, true
		}
		if nextKey == curKey {
			return chain, true, false
		}
		chain = append(chain, next)
		cur, curKey = next, nextKey
	}
	return chain, false, false
}

func (m *Matcher) mask(v *Vocab, allowed []uint64) int {
	clear(allowed)
	n := 0
	if m.Done() {
		for _, id := range v.ends {
			allowed[id>>6] |= 1 << (id & 63)
			n++
		}
	}
	mark := len(m.frames)
	defer func() { m.frames = m.frames[:mark] }()
	// Plain tokens by the chain where it decides them, one by one:
	// allowed when the chain is alive at their length.
	chain, fixed, dead := m.plainChain(v.maxPlain)
	if fixed || dead || len(chain) > v.maxPlain {
		for _, id := range v.plain.order {
			if k := len(v.bytes[id]); k < len(chain) || fixed && len(chain[len(chain)-1]) > 0 {
				allowed[id>>6] |= 1 << (id & 63)
				n++
			}
		}
	} else {
		n += m.walk(v, &v.plain, allowed)
	}
	return n + m.walk(v, &v.other, allowed)
}

// walk sets the tokens of l that the state allows, walking them in
// order so that a shared prefix is stepped once.
func (m *Matcher) walk(v *Vocab, l *tokenList, allowed []uint64) int {
	n := 0
	mark := len(m.frames)
	// Level d holds the stacks after the current token's first d bytes:
	// buf[start[d]:start[d+1]], built with frames up to fmark[d].
	buf := append(m.buf[:0], m.stacks...)
	start := append(make([]int, 0, l.maxLen+2), 0, len(buf))
	fmark := append(make([]int, 0, l.maxLen+2), mark)
	dead := 1 << 30 // the depth at which the current prefix has no stacks
	for i, id := range l.order {
		b := v.bytes[id]
		lc := int(l.lcp[i])
		if dead <= lc {
			continue
		}
		dead = 1 << 30
		if depth := len(start) - 2; depth > lc {
			start = start[:lc+2]
			fmark = fmark[:lc+1]
			buf = buf[:start[lc+1]]
			m.frames = m.frames[:fmark[lc]]
		}
		ok := true
		for d := lc; d < len(b); d++ {
			cur := buf[start[d]:start[d+1]]
			buf = m.step(buf, cur, b[d])
			fmark = append(fmark, len(m.frames))
			start = append(start, len(buf))
			if start[d+2] == start[d+1] {
				dead, ok = d+1, false
				break
			}
		}
		if ok {
			allowed[id>>6] |= 1 << (id & 63)
			n++
		}
	}
	m.buf = buf[:0]
	m.frames = m.frames[:mark]
	return n
}

// Accept consumes token id: its bytes, or an end token where the
// document is complete.
func (m *Matcher) Accept(v *Vocab, id int32) error {
	if v.IsEnd(id) {
		if !m.Done() {
			return fmt.Errorf("%w: end token %d before the document is complete", ErrRejected, id)
		}
		return nil
	}
	b := v.Bytes(id)
	if len(b) == 0 {
		return fmt.Errorf("%w: token %d has no bytes", ErrRejected, id)
	}
	if err := m.Advance(b); err != nil {
		return fmt.Errorf("token %d: %w", id, err)
	}
	return nil
}

// Clone is an independent copy of the matcher's state.
func (m *Matcher) Clone() *Matcher {
	return &Matcher{g: m.g, frames: slices.Clone(m.frames), stacks: slices.Clone(m.stacks)}
}
