package engine

import (
	"errors"
	"strings"
	"testing"
)

// TestHoistConditionals: the rewrite moves each bracketed conditional into
// a set tag before its tag, keeps the tag's whitespace control, and leaves
// strings, comments, raw blocks and unbracketed conditionals alone.
func TestHoistConditionals(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{{ 'a' + (x if c else 'y') }}`, `{%+ set __strata_cond0 = x if c else 'y' %}{{ 'a' + (__strata_cond0) }}`},
		{`{{- f(1, x if c else y) -}}`, `{%- set __strata_cond0 = x if c else y %}{{- f(1,__strata_cond0) -}}`},
		{`{% set v = [a if b else c] %}`, `{% set __strata_cond0 = a if b else c %}{% set v = [__strata_cond0] %}`},
		{`{{ v | tojson(indent=(2 if c else 4)) }}`, `{%+ set __strata_cond0 = 2 if c else 4 %}{{ v | tojson(indent=(__strata_cond0)) }}`},
		{`{{ f(k=a if c else b) }}`, `{%+ set __strata_cond0 = a if c else b %}{{ f(k=__strata_cond0) }}`},
		{`{{ ((a if b else c) if d else e) }}`, `{%+ set __strata_cond0 = a if b else c %}{%+ set __strata_cond1 = (__strata_cond0) if d else e %}{{ (__strata_cond1) }}`},
		// Untouched: a top-level conditional, a comparison in brackets,
		// the words in a string, a comment or a raw block, a dict entry.
		{`{{ a if b else c }}`, `{{ a if b else c }}`},
		{`{% if (a == b) != (c == 'if') %}x{% endif %}`, `{% if (a == b) != (c == 'if') %}x{% endif %}`},
		{`{{ "(a if b else c)" }}{# (a if b else c) #}`, `{{ "(a if b else c)" }}{# (a if b else c) #}`},
		{`{% raw %}{{ (a if b else c) }}{% endraw %}`, `{% raw %}{{ (a if b else c) }}{% endraw %}`},
		{`{{ {'k': a if b else c} }}`, `{{ {'k': a if b else c} }}`},
		{`{{ s[1:] }} { plain {`, `{{ s[1:] }} { plain {`},
		{`{% for i in (a if b else c) %}{{ i }}{% endfor %}`, `{% set __strata_cond0 = a if b else c %}{% for i in (__strata_cond0) %}{{ i }}{% endfor %}`},
	} {
		got, ok := hoistConditionals(c.in)
		if !ok || got != c.want {
			t.Errorf("%s:\n got  %s (%v)\n want %s", c.in, got, ok, c.want)
		}
	}
	// Nothing can be written before an elif, and broken input is refused.
	for _, in := range []string{
		`{% if a %}{% elif (b if c else d) %}{% endif %}`,
		`{{ (a if b else c }}`,
		`{{ a) }}`,
		`{{ 'unterminated }}`,
		`{# open comment`,
	} {
		if got, ok := hoistConditionals(in); ok {
			t.Errorf("%s: rewritten as %s", in, got)
		}
	}
}

// TestChatTemplateHoisted: a template gonja refuses renders once rewritten
// (as testdata/chat/cond.jinja does against @huggingface/jinja), and one
// the rewrite cannot fix reports gonja's own parse error.
func TestChatTemplateHoisted(t *testing.T) {
	tok := testTokenizer(t, "qwen2", 512)
	req := ChatRequest{Messages: []any{map[string]any{"role": "user", "content": " Hi "}}, AddGenerationPrompt: true}
	tok.chat = &chatTemplate{src: "{% for m in messages %}\n  {{ '[' + (m['role'] if loop.first else 'x') + ']' + (m['content'] | trim) }}\n{% endfor %}"}
	got, err := tok.RenderChat(req)
	if err != nil || got != "  [user]Hi\n" {
		t.Errorf("rendered %q, %v", got, err)
	}
	tok.chat = &chatTemplate{src: "{% if a %}{% elif (b if c else d) %}{% endif %}"}
	if _, err := tok.RenderChat(req); !errors.Is(err, ErrChatTemplate) || !strings.Contains(err.Error(), "parenthesis") {
		t.Errorf("elif: %v", err)
	}
}

// FuzzHoistConditionals: the rewrite never panics, and text without a
// bracketed `if` comes back unchanged.
func FuzzHoistConditionals(f *testing.F) {
	for _, s := range []string{`{{ 'a' + (x if c else 'y') }}`, `{% set v = [a if b else c] %}`, `{# c #}{% raw %}{{{% endraw %}`, `{{ "(" }}`, "plain {", "{%%}", "{%\x00%}", "{% raw-%}x{%endraw%}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		got, ok := hoistConditionals(src)
		if ok && !strings.Contains(got, "__strata_cond") && got != src {
			t.Fatalf("%q rewritten as %q", src, got)
		}
	})
}

// TestKeepMidLineSpace: a {% or {# tag with only spaces or tabs between it
// and the tag before it gets `+`; one at the start of a line or of the
// template, after text, with its own control, or inside a string or a
// raw block does not.
func TestKeepMidLineSpace(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{{ a }} {% if b %}x{% endif %}`, `{{ a }} {%+ if b %}x{% endif %}`},
		{"{% if a %}x{% endif %}\t {# c #}", "{% if a %}x{% endif %}\t {#+ c #}"},
		{`{# c #} {% if a %}{% endif %}`, `{# c #} {%+ if a %}{% endif %}`},
		{"  {% if a %}{% endif %}\n  {% if b %}{% endif %}", "  {% if a %}{% endif %}\n  {% if b %}{% endif %}"},
		{`{{ a }} x {% if b %}{% endif %}`, `{{ a }} x {% if b %}{% endif %}`},
		{`{{ a }} {%- if b %}{% endif %} {%+ if c %}{% endif %}`, `{{ a }} {%- if b %}{% endif %} {%+ if c %}{% endif %}`},
		{`{{ a }} {{ b }}`, `{{ a }} {{ b }}`},
		{`{{ '}} {% x' }} {% if a %}{% endif %}`, `{{ '}} {% x' }} {%+ if a %}{% endif %}`},
		{`{% raw %}}} {% if %}{% endraw %} {% if a %}{% endif %}`, `{% raw %}}} {% if %}{% endraw %} {%+ if a %}{% endif %}`},
		{`{ {% if a %}{% endif %}`, `{ {% if a %}{% endif %}`},
	} {
		got, ok := keepMidLineSpace(c.in)
		if !ok || got != c.want {
			t.Errorf("%q:\n got  %q (%v)\n want %q", c.in, got, ok, c.want)
		}
	}
	for _, in := range []string{`{{ a`, `{% if a`, `{# c`, `{% raw %}x`} {
		if _, ok := keepMidLineSpace(in); ok {
			t.Errorf("%q: rewritten, want refused", in)
		}
	}
}
