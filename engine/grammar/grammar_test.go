package grammar

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// matches reports whether doc is a complete document of the spec.
func matches(t *testing.T, g *Grammar, doc string) bool {
	t.Helper()
	m := g.NewMatcher()
	if err := m.Advance([]byte(doc)); err != nil {
		if !errors.Is(err, ErrRejected) {
			t.Fatalf("advance: %v", err)
		}
		return false
	}
	return m.Done()
}

func mustCompile(t testing.TB, schema string) *Grammar {
	t.Helper()
	g, err := Compile(&Spec{Schema: json.RawMessage(schema)})
	if err != nil {
		t.Fatalf("compile %s: %v", schema, err)
	}
	return g
}

const personSchema = `{"type": "object", "properties": {
	"name": {"type": "string", "maxLength": 6},
	"age": {"type": "integer"},
	"tags": {"type": "array", "items": {"enum": ["a", "b\"c", 3, null]}, "maxItems": 3},
	"kind": {"anyOf": [{"type": "null"}, {"const": {"x": [1, true]}}]},
	"score": {"type": ["number", "boolean"]},
	"nick": {"type": "string"}
}, "required": ["name", "age", "tags", "kind", "score"], "additionalProperties": false}`

func TestSchemaAcceptReject(t *testing.T) {
	person := mustCompile(t, personSchema)
	tree := mustCompile(t, `{"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
		"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v", "kids"], "additionalProperties": false}},
		"$ref": "#/$defs/node"}`)
	anyObj := mustCompile(t, `{"type": "object"}`)
	opt := mustCompile(t, `{"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}, "c": {"type": "boolean"}},
		"required": ["b"]}`)
	for _, tc := range []struct {
		g    *Grammar
		doc  string
		want bool
	}{
		{person, `{"name":"Ann","age":42,"tags":["a",3,null],"kind":null,"score":1.5e-3}`, true},
		{person, ` { "name" : "Ann" , "age" : -0 , "tags" : [ ] , "kind" : {"x":[1,true]} , "score" : true , "nick" : "\u00e9\n" } `, true},
		{person, `{"name":"Ann","age":42,"tags":[],"kind":null,"score":1}`, true},
		{person, `{"name":"Ann","age":42,"tags":["b\"c"],"kind":null,"score":false}`, true},
		{person, `{"name":"Ann","age":42,"tags":[],"kind":null}`, false},                             // score required
		{person, `{"age":42,"name":"Ann","tags":[],"kind":null,"score":1}`, false},                   // order fixed
		{person, `{"name":"Annabel","age":42,"tags":[],"kind":null,"score":1}`, false},               // maxLength 6
		{person, `{"name":"Ann","age":4.2,"tags":[],"kind":null,"score":1}`, false},                  // integer
		{person, `{"name":"Ann","age":042,"tags":[],"kind":null,"score":1}`, false},                  // leading zero
		{person, `{"name":"Ann","age":1,"tags":["a","a","a","a"],"kind":null,"score":1}`, false},     // maxItems
		{person, `{"name":"Ann","age":1,"tags":["c"],"kind":null,"score":1}`, false},                 // enum
		{person, `{"name":"Ann","age":1,"tags":[],"kind":{"x":[1]},"score":1}`, false},               // const
		{person, `{"name":"Ann","age":1,"tags":[],"kind":null,"score":1,"extra":1}`, false},          // additionalProperties
		{person, `{"name":"A` + "\x01" + `","age":1,"tags":[],"kind":null,"score":1}`, false},        // control character
		{person, `{"name":"` + "\xed\xa0\x80" + `","age":1,"tags":[],"kind":null,"score":1}`, false}, // a surrogate in UTF-8
		{person, `{"name":"日本","age":1,"tags":[],"kind":null,"score":1}`, true},
		{person, `{"name":"\x","age":1,"tags":[],"kind":null,"score":1}`, false},
		{tree, `{"v":1,"kids":[{"v":2,"kids":[]},{"v":3,"kids":[{"v":4,"kids":[]}]}]}`, true},
		{tree, `{"v":1,"kids":[{"v":2}]}`, false},
		{anyObj, `{"a":[1,{"b":null}],"c":"d","a":2}`, true},
		{anyObj, `[1]`, false},
		{anyObj, `{}`, true},
		{opt, `{"b":null}`, true},
		{opt, `{"a":true,"b":null,"c":false}`, true},
		{opt, `{"a":true,"c":false}`, false},
		{opt, `{"b":null,"a":true}`, false},
		{opt, `{}`, false},
	} {
		if got := matches(t, tc.g, tc.doc); got != tc.want {
			t.Errorf("%q: matched %v, want %v", tc.doc, got, tc.want)
		}
		if tc.want && !json.Valid([]byte(tc.doc)) {
			t.Errorf("%q is not JSON: the table is wrong", tc.doc)
		}
	}
}

func TestSchemaRefused(t *testing.T) {
	for _, tc := range []struct{ schema, where string }{
		{`{"type": "string", "pattern": "^a$"}`, "pattern"},
		{`{"type": "string", "format": "email"}`, "format"},
		{`{"allOf": [{"type": "string"}]}`, "allOf"},
		{`{"oneOf": [{"type": "string"}, {"type": "null"}]}`, "oneOf"},
		{`{"$ref": "https://example.com/s.json"}`, "$ref"},
		{`{"$ref": "#/$defs/missing"}`, "does not resolve"},
		{`{"type": "frob"}`, "frob"},
		{`{"type": "string", "maxLength": 1000000}`, "maxLength"},
		{`{"type": "object", "properties": {"a": {"type": "number", "minimum": 3}}}`, "properties.a.minimum"},
		{`{"type": "object", "properties": {"a": {}}, "required": ["b"]}`, "required"},
		{`false`, "false"},
		{`{"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}`, "left recursion"},
		{`not json`, "not JSON"},
	} {
		_, err := Compile(&Spec{Schema: json.RawMessage(tc.schema)})
		if !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), tc.where) {
			t.Errorf("%s: %v, want an unsupported error naming %q", tc.schema, err, tc.where)
		}
	}
}

// testVocab: single bytes, multi-byte tokens that span grammar
// boundaries, and an end token.
func testVocab() (*Vocab, []string) {
	words := []string{"{", "}", "\"", ":", ",", " ", "\n", "[", "]", "a", "b", "n", "0", "1", "9", "-", ".", "e",
		"{\"", "\":", "\",\"", "\"}", "}]", "null", "true", "false", "na", "name", "\"name\":\"", "ab", "a\"", "\"a", "1,", ",\"",
		"12", "0.5", "é", "\xc3", "\xa9", "\\", "\\n", "\\u00", "e9", "  ", "{}", "[]", "}}", "\":\"", "tags", "age", "score", "kind",
		"nick", "\"age\":", "x", "\"x\":[1,true]}", "\x01", ""}
	for c := byte(0x20); c < 0x7f; c++ {
		words = append(words, string([]byte{c}))
	}
	pieces := make([][]byte, len(words)+1)
	for i, w := range words {
		pieces[i] = []byte(w)
	}
	return NewVocab(pieces, []int32{int32(len(words))}), words
}

// TestMaskMatchesAdvance: a token is in the mask exactly when its bytes
// advance the matcher (checked token by token on a copy), across random
// walks; the end token exactly when the document is complete.
func TestMaskMatchesAdvance(t *testing.T) {
	v, _ := testVocab()
	g := mustCompile(t, personSchema)
	rng := rand.New(rand.NewPCG(1, 2))
	allowed := make([]uint64, (v.Size()+63)/64)
	for walk := 0; walk < 8; walk++ {
		m := g.NewMatcher()
		var doc []byte
		for step := 0; step < 200; step++ {
			n := m.Mask(v, allowed)
			var ids []int32
			for id := 0; id < v.Size(); id++ {
				in := allowed[id>>6]&(1<<(id&63)) != 0
				var want bool
				if v.IsEnd(int32(id)) {
					want = m.Done()
				} else if b := v.Bytes(int32(id)); len(b) > 0 {
					c := g.NewMatcher()
					want = c.Advance(append(append([]byte(nil), doc...), b...)) == nil
				}
				if in != want {
					t.Fatalf("walk %d after %q: token %q in mask %v, advances %v", walk, doc, v.Bytes(int32(id)), in, want)
				}
				if in {
					ids = append(ids, int32(id))
				}
			}
			if n != len(ids) || n == 0 {
				t.Fatalf("after %q: mask counts %d of %d allowed", doc, n, len(ids))
			}
			id := ids[rng.IntN(len(ids))]
			if v.IsEnd(id) {
				break
			}
			if err := m.Accept(v, id); err != nil {
				t.Fatal(err)
			}
			doc = append(doc, v.Bytes(id)...)
		}
	}
}

// TestWalksAreValid: random walks through the mask end in JSON that
// encoding/json reads, of the schema's shape.
func TestWalksAreValid(t *testing.T) {
	v, _ := testVocab()
	g := mustCompile(t, personSchema)
	allowed := make([]uint64, (v.Size()+63)/64)
	rng := rand.New(rand.NewPCG(3, 4))
	done := 0
	for walk := 0; walk < 300; walk++ {
		m := g.NewMatcher()
		var doc []byte
		for step := 0; step < 400; step++ {
			m.Mask(v, allowed)
			var ids []int32
			for id := 0; id < v.Size(); id++ {
				if allowed[id>>6]&(1<<(id&63)) != 0 {
					ids = append(ids, int32(id))
				}
			}
			id := ids[rng.IntN(len(ids))]
			if v.IsEnd(id) {
				var p struct {
					Name  *string `json:"name"`
					Age   *int64  `json:"age"`
					Tags  []any   `json:"tags"`
					Score any     `json:"score"`
				}
				if err := json.Unmarshal(doc, &p); err != nil || p.Name == nil || p.Age == nil || p.Tags == nil || p.Score == nil {
					t.Fatalf("walk %d: %q: %v %+v", walk, doc, err, p)
				}
				done++
				break
			}
			if err := m.Accept(v, id); err != nil {
				t.Fatal(err)
			}
			doc = append(doc, v.Bytes(id)...)
		}
	}
	if done < 100 {
		t.Fatalf("only %d of 300 walks ended", done)
	}
}

// TestMaskSpanningTokens: tokens that cross grammar boundaries (a
// string's end, a key, a colon and the next value's start; a partial
// escape; half a UTF-8 character) are allowed exactly when their whole
// bytes fit; the end token only once the document is complete.
func TestMaskSpanningTokens(t *testing.T) {
	g := mustCompile(t, personSchema)
	for _, tc := range []struct {
		prefix string
		yes    []string
		no     []string
		end    bool
	}{
		{`{"name":"An`, []string{`n","age":`, `n","age":-`, `\u00`, "\xc3", `n`, `nnn`}, []string{`n"}`, `nnnnn`, `n","ag":`, `\x`, "\xc0", `n","age":00`}, false},
		{`{"name":"Ann","age":4`, []string{`2,"tags":[`, `2 , "tags" : [ ] ,`}, []string{`2.5`, `2,"kind":`}, false},
		{`{"name":"A","age":1,"tags":[],"kind":null,"score":1`, []string{`}`, `.5e-3}`, `} `, `}` + "\n"}, []string{`}}`, `,}`}, false},
		{`{"name":"A","age":1,"tags":[],"kind":null,"score":1}`, []string{` `, "\n\t"}, []string{`x`, `}`}, true},
	} {
		words := append(append([]string{}, tc.yes...), tc.no...)
		pieces := make([][]byte, len(words)+1)
		for i, w := range words {
			pieces[i] = []byte(w)
		}
		v := NewVocab(pieces, []int32{int32(len(words))})
		m := g.NewMatcher()
		if err := m.Advance([]byte(tc.prefix)); err != nil {
			t.Fatalf("%q: %v", tc.prefix, err)
		}
		allowed := make([]uint64, 1)
		m.Mask(v, allowed)
		for i, w := range words {
			if in := allowed[0]&(1<<i) != 0; in != (i < len(tc.yes)) {
				t.Errorf("after %q: %q allowed %v", tc.prefix, w, in)
			}
		}
		if in := allowed[0]&(1<<len(words)) != 0; in != tc.end {
			t.Errorf("after %q: the end allowed %v", tc.prefix, in)
		}
	}
}

// TestAmbiguousRefused: an anyOf of many schemas that agree for long
// would multiply the matcher's work; past maxStacks parses it refuses
// (ErrTooLarge) rather than stall the node that samples.
func TestAmbiguousRefused(t *testing.T) {
	var alts []string
	for i := range maxStacks + 10 {
		alts = append(alts, fmt.Sprintf(`{"type": "object", "properties": {"a": {"type": "string"}, "b": {"const": %d}}, "required": ["a", "b"]}`, i))
	}
	g := mustCompile(t, `{"anyOf": [`+strings.Join(alts, ",")+`]}`)
	if err := g.NewMatcher().Advance([]byte(`{"a":"x`)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("advance: %v", err)
	}
	v, _ := testVocab()
	if _, err := NewConstraint(g, v).Apply(make([]float32, v.Size())); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("apply: %v", err)
	}
	// An enum of as many values is one parse (a trie of its texts).
	var vals []string
	for i := range 2 * maxStacks {
		vals = append(vals, fmt.Sprintf(`"v%d"`, i))
	}
	g = mustCompile(t, `{"enum": [`+strings.Join(vals, ",")+`, "v", ""]}`)
	for _, doc := range []string{`"v511"`, `"v"`, `""`, `"v0"`} {
		if !matches(t, g, doc) {
			t.Fatalf("%s refused", doc)
		}
	}
	if matches(t, g, `"v512"`) || matches(t, g, `"w"`) {
		t.Fatal("a value outside the enum matched")
	}
	// So are many tools' calls, which share their syntax's opening.
	var calls []Call
	for i := range 2 * maxStacks {
		calls = append(calls, Call{Prefix: fmt.Sprintf(`<tool_call>{"name": "f%d", "arguments": `, i), Schema: json.RawMessage(`{"type": "object"}`), Suffix: "}</tool_call>"})
	}
	gc, err := Compile(&Spec{Calls: calls})
	if err != nil {
		t.Fatal(err)
	}
	if !matches(t, gc, `<tool_call>{"name": "f300", "arguments": {"x":1}}</tool_call>`) || matches(t, gc, `<tool_call>{"name": "f600", "arguments": {}}</tool_call>`) {
		t.Fatal("calls")
	}
	// Fewer alternatives are fine.
	g = mustCompile(t, `{"anyOf": [`+strings.Join(alts[:20], ",")+`]}`)
	if err := g.NewMatcher().Advance([]byte(`{"a":"x","b":19}`)); err != nil {
		t.Fatal(err)
	}
}
