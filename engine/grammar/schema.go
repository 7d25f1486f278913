package grammar

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Bounds of the JSON the grammars write. Numbers are bounded so that a
// document always can end (a model may not write digits forever); the
// bounds are past what a float64 or an int64 holds.
const (
	maxIntDigits  = 19 // integer part, after a leading non-zero digit: 1 + 18
	maxFracDigits = 17
	maxExpDigits  = 2 // up to 1e99: within float64
	// maxWS is the longest run of whitespace between two tokens of JSON.
	maxWS = 16
	// maxBound caps minLength, maxLength, minItems and maxItems: each
	// unit costs grammar rules.
	maxBound = 4096
	// maxDepth bounds schema nesting (recursion through $ref is fine:
	// it is a rule, not a copy).
	maxDepth = 64
)

// schemaCompiler turns a JSON schema into rules.
type schemaCompiler struct {
	b    *builder
	root *obj
	refs map[string]int32 // $ref → its rule, for recursion
}

// Annotations carry no constraint.
var annotations = map[string]bool{"title": true, "description": true, "default": true, "examples": true,
	"$schema": true, "$id": true, "$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"$defs": true, "definitions": true, "strict": true}

func newSchemaCompiler(b *builder, root *obj) *schemaCompiler {
	c := &schemaCompiler{b: b, root: root, refs: map[string]int32{}}
	if b.ws < 0 {
		// ws: up to maxWS of space, tab, newline.
		b.ws = b.upTo(set(" \t\n"), maxWS).rule
	}
	return c
}

func (c *schemaCompiler) wsItem() item { return ref(c.b.ws) }

// strChar is one JSON string character: any UTF-8 character but the
// quote, the backslash and controls, or an escape.
func (c *schemaCompiler) strChar() item {
	b := c.b
	if b.char >= 0 {
		return ref(b.char)
	}
	hex := func() item {
		var h class
		h.add('0', '9')
		h.add('a', 'f')
		h.add('A', 'F')
		return item{rule: -1, cls: h}
	}
	var ascii class
	ascii.add(0x20, 0x7f)
	ascii[0] &^= 1 << '"'
	ascii[1] &^= 1 << ('\\' - 64)
	cont := cls(0x80, 0xbf)
	esc := b.rule(seq(set(`"\/bfnrt`)), seq(set("u"), hex(), hex(), hex(), hex()))
	// Well-formed UTF-8 only (RFC 3629): no overlongs, surrogates or
	// values past U+10FFFF.
	r := b.rule(
		seq(item{rule: -1, cls: ascii}),
		seq(set(`\`), ref(esc)),
		seq(cls(0xc2, 0xdf), cont),
		seq(set("\xe0"), cls(0xa0, 0xbf), cont),
		seq(cls(0xe1, 0xec), cont, cont),
		seq(set("\xed"), cls(0x80, 0x9f), cont),
		seq(cls(0xee, 0xef), cont, cont),
		seq(set("\xf0"), cls(0x90, 0xbf), cont, cont),
		seq(cls(0xf1, 0xf3), cont, cont, cont),
		seq(set("\xf4"), cls(0x80, 0x8f), cont, cont),
	)
	b.char = r
	return ref(r)
}

// stringRule is a JSON string of lo..hi characters (hi < 0: any).
func (c *schemaCompiler) stringRule(lo, hi int) int32 {
	if lo == 0 && hi < 0 && c.b.str >= 0 {
		return c.b.str
	}
	q := set(`"`)
	r := c.b.rule(seq(q, c.b.repeat(c.strChar(), lo, hi), q))
	if lo == 0 && hi < 0 {
		c.b.str = r
	}
	return r
}

func (c *schemaCompiler) digits(lo, hi int) item { return c.b.repeat(cls('0', '9'), lo, hi) }

// intRule: -?(0|[1-9][0-9]{0,18}).
func (c *schemaCompiler) intRule() int32 {
	if c.b.integer < 0 {
		b := c.b
		mag := b.rule(seq(set("0")), seq(cls('1', '9'), c.digits(0, maxIntDigits-1)))
		c.b.integer = b.rule(seq(ref(mag)), seq(set("-"), ref(mag)))
	}
	return c.b.integer
}

// numRule: an integer, then an optional fraction and exponent.
func (c *schemaCompiler) numRule() int32 {
	if c.b.num < 0 {
		b := c.b
		frac := b.rule(seq(set("."), c.digits(1, maxFracDigits)), seq())
		exp := b.rule(seq(set("eE"), ref(b.rule(seq(set("+-")), seq())), c.digits(1, maxExpDigits)), seq())
		c.b.num = b.rule(seq(ref(c.intRule()), ref(frac), ref(exp)))
	}
	return c.b.num
}

// anyValueRule is any JSON value.
func (c *schemaCompiler) anyValueRule() int32 {
	if c.b.anyValue >= 0 {
		return c.b.anyValue
	}
	b := c.b
	c.b.anyValue = b.newRule()
	c.b.anyObject = b.newRule()
	arr := b.newRule()
	ws := c.wsItem()
	v := ref(c.b.anyValue)
	b.define(c.b.anyValue, seq(ref(c.b.anyObject)), seq(ref(arr)), seq(ref(c.stringRule(0, -1))), seq(ref(c.numRule())),
		seq(b.lit("true")), seq(b.lit("false")), seq(b.lit("null")))
	member := b.rule(seq(ref(c.stringRule(0, -1)), ws, set(":"), ws, v))
	moreMembers := b.star(ref(b.rule(seq(ws, set(","), ws, ref(member)))))
	b.define(c.b.anyObject, seq(set("{"), ws, set("}")), seq(set("{"), ws, ref(member), moreMembers, ws, set("}")))
	moreValues := b.star(ref(b.rule(seq(ws, set(","), ws, v))))
	b.define(arr, seq(set("["), ws, set("]")), seq(set("["), ws, v, moreValues, ws, set("]")))
	return c.b.anyValue
}

// schemaError names where in the schema a problem is.
func schemaError(path, format string, args ...any) error {
	if path == "" {
		path = "the schema"
	}
	return fmt.Errorf("%w: %s: %s", ErrUnsupported, path, fmt.Sprintf(format, args...))
}

// compile is the rule of schema s at path.
func (c *schemaCompiler) compile(s any, path string, depth int) (int32, error) {
	if depth > maxDepth {
		return 0, schemaError(path, "nested deeper than %d", maxDepth)
	}
	if c.b.err != nil {
		return 0, c.b.err
	}
	switch v := s.(type) {
	case bool:
		if !v {
			return 0, schemaError(path, "false allows no value")
		}
		return c.anyValueRule(), nil
	case *obj:
		return c.compileObject(v, path, depth)
	}
	return 0, schemaError(path, "a schema must be an object or a boolean")
}

func (c *schemaCompiler) compileObject(s *obj, path string, depth int) (int32, error) {
	if r, ok := s.m["$ref"]; ok {
		target, ok := r.(string)
		if !ok {
			return 0, schemaError(path+".$ref", "must be a string")
		}
		for k := range s.m {
			if k != "$ref" && !annotations[k] {
				return 0, schemaError(path, "$ref beside %q is not supported", k)
			}
		}
		return c.compileRef(target, path, depth)
	}
	if e, ok := s.m["enum"]; ok {
		vals, ok := e.([]any)
		if !ok || len(vals) == 0 {
			return 0, schemaError(path+".enum", "must be a non-empty array")
		}
		return c.literals(vals, path+".enum")
	}
	if v, ok := s.m["const"]; ok {
		return c.literals([]any{v}, path+".const")
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		alts, ok := s.m[k]
		if !ok {
			continue
		}
		list, ok := alts.([]any)
		if !ok || len(list) == 0 {
			return 0, schemaError(path+"."+k, "must be a non-empty array")
		}
		if k == "oneOf" && len(list) > 1 {
			return 0, schemaError(path+".oneOf", "oneOf (exactly one) is not supported: use anyOf")
		}
		var opts [][]item
		for i, a := range list {
			r, err := c.compile(a, fmt.Sprintf("%s.%s[%d]", path, k, i), depth+1)
			if err != nil {
				return 0, err
			}
			opts = append(opts, seq(ref(r)))
		}
		for key := range s.m {
			if key != k && key != "type" && !annotations[key] {
				return 0, schemaError(path, "%s beside %q is not supported", k, key)
			}
		}
		return c.b.rule(opts...), nil
	}
	for _, k := range []string{"allOf", "not", "if", "then", "else", "pattern", "format", "patternProperties",
		"propertyNames", "dependentRequired", "dependentSchemas", "minProperties", "maxProperties", "uniqueItems",
		"contains", "prefixItems", "multipleOf",
		"unevaluatedProperties", "unevaluatedItems"} {
		if _, ok := s.m[k]; ok {
			return 0, schemaError(path+"."+k, "%s is not supported", k)
		}
	}
	var types []string
	switch t := s.m["type"].(type) {
	case nil:
		switch {
		case s.m["properties"] != nil:
			types = []string{"object"}
		case s.m["items"] != nil:
			types = []string{"array"}
		default:
			return c.anyValueRule(), nil
		}
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			str, ok := x.(string)
			if !ok {
				return 0, schemaError(path+".type", "must name types")
			}
			types = append(types, str)
		}
		if len(types) == 0 {
			return 0, schemaError(path+".type", "is empty")
		}
	default:
		return 0, schemaError(path+".type", "must be a string or an array of strings")
	}
	var opts [][]item
	for _, t := range types {
		var r int32
		var err error
		switch t {
		case "object":
			r, err = c.objectRule(s, path, depth)
		case "array":
			r, err = c.arrayRule(s, path, depth)
		case "string":
			lo, hi, e := bounds(s, "minLength", "maxLength", path)
			if e != nil {
				return 0, e
			}
			r = c.stringRule(lo, hi)
		case "number":
			for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
				if _, ok := s.m[k]; ok {
					return 0, schemaError(path+"."+k, "%s on a number is not supported (on an integer it is)", k)
				}
			}
			r = c.numRule()
		case "integer":
			lo, hi, bounded, err := intBounds(s, path)
			if err != nil {
				return 0, err
			}
			if bounded {
				r = c.intRange(lo, hi)
			} else {
				r = c.intRule()
			}
		case "boolean":
			r = c.b.rule(seq(c.b.lit("true")), seq(c.b.lit("false")))
		case "null":
			r = c.b.lit("null").rule
		default:
			return 0, schemaError(path+".type", "unknown type %q", t)
		}
		if err != nil {
			return 0, err
		}
		opts = append(opts, seq(ref(r)))
	}
	if len(opts) == 1 {
		return opts[0][0].rule, nil
	}
	return c.b.rule(opts...), nil
}

// bounds reads a min/max pair of non-negative integers.
func bounds(s *obj, minKey, maxKey, path string) (int, int, error) {
	lo, hi := 0, -1
	for i, k := range []string{minKey, maxKey} {
		v, ok := s.m[k]
		if !ok {
			continue
		}
		num, ok := v.(json.Number)
		f, err := num.Float64()
		if !ok || err != nil || f < 0 || f != float64(int(f)) {
			return 0, 0, schemaError(path+"."+k, "must be a non-negative integer")
		}
		if f > maxBound {
			return 0, 0, schemaError(path+"."+k, "%g is past the supported %d", f, maxBound)
		}
		if i == 0 {
			lo = int(f)
		} else {
			hi = int(f)
		}
	}
	if hi >= 0 && hi < lo {
		return 0, 0, schemaError(path, "%s %d is below %s %d", maxKey, hi, minKey, lo)
	}
	return lo, hi, nil
}

// literals is a rule matching each value's JSON text.
func (c *schemaCompiler) literals(vals []any, path string) (int32, error) {
	var texts []string
	for _, v := range vals {
		texts = append(texts, string(appendJSON(nil, v)))
	}
	slices.Sort(texts)
	return c.trie(slices.Compact(texts)), nil
}

// trie matches any of the sorted, distinct texts, deterministically:
// one alternative per first byte, then the texts that share it, so that
// an enum of many values is one parse, not one per value.
func (c *schemaCompiler) trie(texts []string) int32 {
	var alts [][]item
	for i := 0; i < len(texts); {
		if texts[i] == "" {
			alts = append(alts, seq())
			i++
			continue
		}
		j := i
		var rest []string
		for j < len(texts) && texts[j] != "" && texts[j][0] == texts[i][0] {
			rest = append(rest, texts[j][1:])
			j++
		}
		if len(rest) == 1 {
			alts = append(alts, seq(set(texts[i][:1]), c.b.lit(rest[0])))
		} else {
			alts = append(alts, seq(set(texts[i][:1]), ref(c.trie(rest))))
		}
		i = j
	}
	return c.b.rule(alts...)
}

// compileRef resolves a local reference: "#", "#/$defs/NAME" or
// "#/definitions/NAME" (and deeper JSON pointers into the root).
func (c *schemaCompiler) compileRef(name, path string, depth int) (int32, error) {
	if r, ok := c.refs[name]; ok {
		return r, nil
	}
	if !strings.HasPrefix(name, "#") {
		return 0, schemaError(path+".$ref", "only local references (#/$defs/...) are supported, not %q", name)
	}
	var target any = c.root
	if p := strings.TrimPrefix(name, "#"); p != "" {
		if !strings.HasPrefix(p, "/") {
			return 0, schemaError(path+".$ref", "%q is not a JSON pointer", name)
		}
		for _, part := range strings.Split(p[1:], "/") {
			part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
			m, ok := target.(*obj)
			if !ok {
				return 0, schemaError(path+".$ref", "%q does not resolve", name)
			}
			if target, ok = m.m[part]; !ok {
				return 0, schemaError(path+".$ref", "%q does not resolve", name)
			}
		}
	}
	// Reserve the rule first: the target may refer back to it.
	r := c.b.newRule()
	c.refs[name] = r
	inner, err := c.compile(target, name, depth+1)
	if err != nil {
		return 0, err
	}
	c.b.define(r, seq(ref(inner)))
	return r, nil
}

// objectRule writes the declared properties in the schema's order, each
// at most once; required ones always, optional ones maybe. Without
// declared properties and with additionalProperties absent, true or a
// schema, any members (of that schema's values).
func (c *schemaCompiler) objectRule(s *obj, path string, depth int) (int32, error) {
	for _, k := range []string{"minProperties", "maxProperties"} {
		if _, ok := s.m[k]; ok {
			return 0, schemaError(path+"."+k, "%s is not supported", k)
		}
	}
	props, _ := s.m["properties"].(*obj)
	if s.m["properties"] != nil && props == nil {
		return 0, schemaError(path+".properties", "must be an object")
	}
	if props == nil {
		props = &obj{m: map[string]any{}}
	}
	req := map[string]bool{}
	if r, ok := s.m["required"]; ok {
		list, ok := r.([]any)
		if !ok {
			return 0, schemaError(path+".required", "must be an array of names")
		}
		for _, x := range list {
			name, ok := x.(string)
			if !ok {
				return 0, schemaError(path+".required", "must be an array of names")
			}
			if _, ok := props.m[name]; !ok {
				return 0, schemaError(path+".required", "%q is not among the properties", name)
			}
			req[name] = true
		}
	}
	b := c.b
	ws := c.wsItem()
	if len(props.m) == 0 {
		switch ap := s.m["additionalProperties"].(type) {
		case nil, bool:
			if ap == false {
				return b.rule(seq(set("{"), ws, set("}"))), nil
			}
			c.anyValueRule()
			return c.b.anyObject, nil
		case *obj:
			val, err := c.compile(ap, path+".additionalProperties", depth+1)
			if err != nil {
				return 0, err
			}
			member := b.rule(seq(ref(c.stringRule(0, -1)), ws, set(":"), ws, ref(val)))
			more := b.star(ref(b.rule(seq(ws, set(","), ws, ref(member)))))
			return b.rule(seq(set("{"), ws, set("}")), seq(set("{"), ws, ref(member), more, ws, set("}"))), nil
		default:
			return 0, schemaError(path+".additionalProperties", "must be a boolean or a schema")
		}
	}
	// Properties in the order the schema lists them: encoding/json's map
	// loses it, so read the keys' order from the raw text when known.
	names := props.keys
	members := make([]int32, len(names))
	for i, name := range names {
		val, err := c.compile(props.m[name], path+".properties."+name, depth+1)
		if err != nil {
			return 0, err
		}
		key := appendString(nil, name)
		members[i] = b.rule(seq(b.lit(string(key)), ws, set(":"), ws, ref(val)))
	}
	// after[i]: what may follow member i (or the opening brace, i = n):
	// a comma and a later member, no required member skipped, or the
	// closing brace when no required member is left.
	n := len(names)
	after := make([]int32, n+1)
	for i := range after {
		after[i] = b.newRule()
	}
	for i := 0; i <= n; i++ {
		var opts [][]item
		from := i + 1
		if i == n {
			from = 0
		}
		lastReq := n
		for j := from; j < n; j++ {
			if req[names[j]] {
				lastReq = j
				break
			}
		}
		for j := from; j < n && j <= lastReq; j++ {
			if i == n {
				opts = append(opts, seq(ref(members[j]), ref(after[j])))
			} else {
				opts = append(opts, seq(ws, set(","), ws, ref(members[j]), ref(after[j])))
			}
		}
		if lastReq == n {
			opts = append(opts, seq(ws, set("}")))
		}
		if i == n {
			b.define(after[i], seq(set("{"), ws, ref(b.rule(opts...))))
		} else {
			b.define(after[i], opts...)
		}
	}
	return after[n], nil
}

func (c *schemaCompiler) arrayRule(s *obj, path string, depth int) (int32, error) {
	b := c.b
	lo, hi, err := bounds(s, "minItems", "maxItems", path)
	if err != nil {
		return 0, err
	}
	var items int32
	if it, ok := s.m["items"]; ok {
		if items, err = c.compile(it, path+".items", depth+1); err != nil {
			return 0, err
		}
	} else {
		items = c.anyValueRule()
	}
	ws := c.wsItem()
	if hi == 0 {
		return b.rule(seq(set("["), ws, set("]"))), nil
	}
	more := b.repeat(ref(b.rule(seq(ws, set(","), ws, ref(items)))), max(lo-1, 0), hi-1)
	if hi < 0 {
		more = b.repeat(ref(b.rule(seq(ws, set(","), ws, ref(items)))), max(lo-1, 0), -1)
	}
	nonEmpty := seq(set("["), ws, ref(items), more, ws, set("]"))
	if lo == 0 {
		return b.rule(seq(set("["), ws, set("]")), nonEmpty), nil
	}
	return b.rule(nonEmpty), nil
}
