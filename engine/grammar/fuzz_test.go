package grammar

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzSchema compiles arbitrary schemas and walks arbitrary bytes: it
// never panics; a compile error wraps ErrUnsupported or ErrTooLarge; a
// document the matcher accepts whole is JSON; and the mask of a small
// vocabulary agrees, token by token, with advancing a copy of the
// matcher by the token's bytes. The seed corpus is in
// testdata/fuzz/FuzzSchema.
func FuzzSchema(f *testing.F) {
	f.Add([]byte(personSchema), []byte(`{"name":"Ann","age":42,"tags":["a"],"kind":null,"score":1}`))
	f.Add([]byte(`{"type": "object"}`), []byte(`{"a":[1,{"b":null}],"c":"\u00e9"}`))
	f.Add([]byte(`{"type": "integer", "minimum": -15, "maximum": 300}`), []byte(`-15`))
	f.Add([]byte(`{"anyOf": [{"type": "string", "maxLength": 2}, {"type": "array", "items": {"$ref": "#"}}]}`), []byte(`[["ab"],[]]`))
	f.Add([]byte(`{"enum": ["a\"b", 1.5, {"x": [true]}]}`), []byte(`{"x":[true]}`))
	f.Fuzz(func(t *testing.T, schema, doc []byte) {
		g, err := Compile(&Spec{Schema: schema})
		if err != nil {
			if !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("compile: %v", err)
			}
			return
		}
		m := g.NewMatcher()
		if m.Advance(doc) == nil && m.Done() && !json.Valid(doc) {
			t.Fatalf("accepted %q, which is not JSON", doc)
		}
		// The mask against the matcher, after a prefix of doc it accepts.
		m = g.NewMatcher()
		for i := range doc {
			if m.Advance(doc[i:i+1]) != nil {
				break
			}
		}
		pieces := [][]byte{[]byte(`"`), []byte(`{"`), []byte(`":`), []byte(`1,`), []byte(`a`), []byte(`ab"`), []byte(` `),
			[]byte(`null`), []byte(`}]`), []byte("\xc3\xa9"), []byte("\xc3"), []byte(`\n`), []byte(`-0`), []byte(`[`), nil}
		v := NewVocab(pieces, []int32{int32(len(pieces) - 1)})
		allowed := make([]uint64, 1)
		m.Mask(v, allowed)
		for id, p := range pieces {
			in := allowed[0]&(1<<id) != 0
			want := m.Done()
			if p != nil {
				want = m.Clone().Advance(p) == nil
			}
			if in != want {
				t.Fatalf("token %q: in the mask %v, advances %v", p, in, want)
			}
		}
	})
}
