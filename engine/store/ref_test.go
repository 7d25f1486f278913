package store

import (
	"errors"
	"strings"
	"testing"
)

func TestParseRef(t *testing.T) {
	good := []struct {
		in   string
		want Ref
		name string
	}{
		{"Qwen/Qwen2.5-7B-Instruct-GGUF:Q4_K_M", Ref{Kind: KindHub, Repo: "Qwen/Qwen2.5-7B-Instruct-GGUF", Quant: "q4_k_m"}, "Qwen/Qwen2.5-7B-Instruct-GGUF:q4_k_m"},
		{"hf://bartowski/Llama-3.2-1B-Instruct-GGUF", Ref{Kind: KindHub, Repo: "bartowski/Llama-3.2-1B-Instruct-GGUF"}, "hf://bartowski/Llama-3.2-1B-Instruct-GGUF"},
		{"HF://o/r:iq4_xs", Ref{Kind: KindHub, Repo: "o/r", Quant: "iq4_xs"}, "o/r:iq4_xs"},
		{"hf://o/r/sub/m-00001-of-00002.gguf", Ref{Kind: KindHub, Repo: "o/r", File: "sub/m-00001-of-00002.gguf"}, "hf://o/r/sub/m-00001-of-00002.gguf"},
		{"https://example.com/m.gguf?sig=1#x", Ref{Kind: KindURL, URL: "https://example.com/m.gguf?sig=1#x"}, "https://example.com/m.gguf"},
		{"http://user:pw@127.0.0.1:8080/a/b.gguf", Ref{Kind: KindURL, URL: "http://user:pw@127.0.0.1:8080/a/b.gguf"}, "http://127.0.0.1:8080/a/b.gguf"},
	}
	for _, c := range good {
		r, err := ParseRef(c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if r != c.want || r.Name() != c.name {
			t.Errorf("%q: %+v name %q, want %+v name %q", c.in, r, r.Name(), c.want, c.name)
		}
	}
	bad := []string{"", "model.gguf", "/tmp/m.gguf", "o/r", "o/r/x:q4", "o:q4", "o/r:", "o/r:q 4", "a/b/c:q4",
		"hf://o", "hf://o/r/../x.gguf", "hf://o/r/", "hf://o/r//x.gguf", "hf://o/r/x.gguf:q4_0", "hf://../r/x.gguf",
		"hf://o/.r/x.gguf", "ftp://h/x.gguf", "https://", "https://h/", "https:///x.gguf", "o/r:q4\n", "hf://o/r/a%2f.gguf"}
	for _, in := range bad {
		if r, err := ParseRef(in); !errors.Is(err, ErrBadRef) {
			t.Errorf("%q: %+v, %v; want ErrBadRef", in, r, err)
		}
	}
}

func TestMatchQuant(t *testing.T) {
	cases := []struct {
		file, quant string
		want        bool
	}{
		{"qwen2.5-7b-instruct-q4_k_m.gguf", "Q4_K_M", true},
		{"Model.Q4_K_M.gguf", "q4_k_m", true},
		{"model-Q4_K_M.gguf", "q4_k", false},
		{"model-Q4_K.gguf", "q4_k", true},
		{"model-q4_0_4_4.gguf", "q4_0", false},
		{"Q4_K_M/model-Q4_K_M-00001-of-00003.gguf", "q4_k_m", true},
		{"UD-Q4_K_XL/model-UD-Q4_K_XL-00001-of-00002.gguf", "q4_k_xl", true},
		{"model-bf16.gguf", "f16", false},
		{"model-f16.gguf", "f16", true},
		{"q8_0.gguf", "q8_0", true},
	}
	for _, c := range cases {
		if got := matchQuant(c.file, c.quant); got != c.want {
			t.Errorf("matchQuant(%q, %q) = %v", c.file, c.quant, got)
		}
	}
}

func TestSplitParts(t *testing.T) {
	p, err := splitParts("d/m-00002-of-00003.gguf")
	if err != nil || strings.Join(p, ",") != "d/m-00001-of-00003.gguf,d/m-00002-of-00003.gguf,d/m-00003-of-00003.gguf" {
		t.Errorf("%v, %v", p, err)
	}
	if p, err := splitParts("m.gguf"); p != nil || err != nil {
		t.Errorf("whole file: %v, %v", p, err)
	}
	for _, f := range []string{"m-00004-of-00003.gguf", "m-00000-of-00003.gguf", "m-00001-of-00000.gguf"} {
		if _, err := splitParts(f); !errors.Is(err, ErrBadRef) {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// FuzzParseRef: no input panics, and a parsed reference's name parses back
// to the same name (the store's index keys are stable).
func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"Qwen/Qwen2.5-7B-Instruct-GGUF:q4_k_m", "hf://o/r", "hf://o/r/a/b-00001-of-00002.gguf", "hf://o/r:Q8_0",
		"https://h.example/x.gguf?a=b", "o/r:", "hf://o/r/../x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRef(s)
		if err != nil {
			if !errors.Is(err, ErrBadRef) {
				t.Fatalf("%q: error %v does not wrap ErrBadRef", s, err)
			}
			return
		}
		name := r.Name()
		r2, err := ParseRef(name)
		if err != nil {
			t.Fatalf("%q: name %q does not parse: %v", s, name, err)
		}
		if r2.Name() != name {
			t.Fatalf("%q: name %q parses to name %q", s, name, r2.Name())
		}
		if r.Kind == KindHub && r.File != "" {
			if err := checkFile(r.File); err != nil {
				t.Fatalf("%q: file %q: %v", s, r.File, err)
			}
		}
	})
}
