package grammar

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Spec says what a constrained generation may write. It travels with the
// request to the node that samples, as JSON (Encode).
type Spec struct {
	// Schema: the document is one JSON value valid against this JSON
	// schema, with whitespace around it. {"type": "object"} is any
	// object (OpenAI's json_object).
	Schema json.RawMessage `json:"schema,omitempty"`
	// Calls: the document is one of these tool calls (a model family's
	// syntax around arguments valid against a tool's parameters).
	Calls []Call `json:"calls,omitempty"`
	// Keep names control tokens whose text counts as output (the
	// family's markers, engine.ChatSyntax.Keep): other control tokens
	// write nothing and are never allowed.
	Keep []string `json:"keep,omitempty"`
}

// Call is one alternative of a tool call: Prefix, then a JSON value
// valid against Schema, then Suffix.
type Call struct {
	Prefix string          `json:"prefix"`
	Schema json.RawMessage `json:"schema"`
	Suffix string          `json:"suffix"`
}

// Encode is the spec's wire form.
func (s *Spec) Encode() []byte {
	b, _ := json.Marshal(s)
	return b
}

// DecodeSpec reads a spec's wire form.
func DecodeSpec(b []byte) (*Spec, error) {
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: spec: %w", ErrUnsupported, err)
	}
	return &s, nil
}

// Compile builds the grammar of a spec. Its errors wrap ErrUnsupported
// (or ErrTooLarge) and name the part of the schema at fault.
func Compile(s *Spec) (*Grammar, error) {
	b := newBuilder()
	switch {
	case len(s.Schema) > 0 && len(s.Calls) > 0:
		return nil, fmt.Errorf("%w: a spec has a schema or calls, not both", ErrUnsupported)
	case len(s.Schema) > 0:
		v, err := compileSchema(b, s.Schema)
		if err != nil {
			return nil, err
		}
		ws := v.wsItem()
		return b.finish(b.rule(seq(ws, ref(v.root), ws)))
	case len(s.Calls) > 0:
		// The calls' prefixes as a trie (they share the syntax's opening
		// and differ at the name), so that many tools are one parse until
		// the name tells them apart.
		var tails []tail
		for i, c := range s.Calls {
			v, err := compileSchema(b, c.Schema)
			if err != nil {
				return nil, fmt.Errorf("call %d: %w", i, err)
			}
			tails = append(tails, tail{c.Prefix, seq(ref(v.root), b.lit(c.Suffix))})
		}
		slices.SortStableFunc(tails, func(x, y tail) int { return strings.Compare(x.text, y.text) })
		return b.finish(b.trieTails(tails))
	}
	return nil, fmt.Errorf("%w: an empty spec", ErrUnsupported)
}

// tail is a text and what follows it.
type tail struct {
	text  string
	items []item
}

// trieTails matches any text (sorted) followed by its items, one
// alternative per first byte.
func (b *builder) trieTails(ts []tail) int32 {
	var alts [][]item
	for i := 0; i < len(ts); {
		if ts[i].text == "" {
			alts = append(alts, ts[i].items)
			i++
			continue
		}
		j := i
		var rest []tail
		for j < len(ts) && ts[j].text != "" && ts[j].text[0] == ts[i].text[0] {
			rest = append(rest, tail{ts[j].text[1:], ts[j].items})
			j++
		}
		alts = append(alts, seq(set(ts[i].text[:1]), ref(b.trieTails(rest))))
		i = j
	}
	return b.rule(alts...)
}

// compiled is a schema's rule.
type compiled struct {
	*schemaCompiler
	root int32
}

func compileSchema(b *builder, raw json.RawMessage) (compiled, error) {
	v, err := parseJSON(raw)
	if err != nil {
		return compiled{}, fmt.Errorf("%w: the schema is not JSON: %w", ErrUnsupported, err)
	}
	root, _ := v.(*obj)
	c := newSchemaCompiler(b, root)
	r, err := c.compile(v, "", 0)
	if err != nil {
		return compiled{}, err
	}
	return compiled{c, r}, nil
}

// CheckSchema reports whether a JSON schema can be compiled.
func CheckSchema(raw json.RawMessage) error {
	_, err := Compile(&Spec{Schema: raw})
	return err
}

// cache holds recently compiled grammars by their spec's wire form: a
// sampler sees the same spec for every token of a generation and often
// across generations.
var cache struct {
	sync.Mutex
	m     map[string]*Grammar
	elems int
}

// maxCached and maxCachedElems bound the cache; past them, it starts
// over.
const (
	maxCached      = 256
	maxCachedElems = 4 * maxElems
)

// CompileCached is Compile through a cache keyed by the spec's wire form.
func CompileCached(wire []byte) (*Grammar, *Spec, error) {
	s, err := DecodeSpec(wire)
	if err != nil {
		return nil, nil, err
	}
	cache.Lock()
	g, ok := cache.m[string(wire)]
	cache.Unlock()
	if ok {
		return g, s, nil
	}
	if g, err = Compile(s); err != nil {
		return nil, nil, err
	}
	cache.Lock()
	if cache.m == nil || len(cache.m) >= maxCached || cache.elems+len(g.elems) > maxCachedElems {
		cache.m, cache.elems = map[string]*Grammar{}, 0
	}
	cache.m[string(wire)] = g
	cache.elems += len(g.elems)
	cache.Unlock()
	return g, s, nil
}
