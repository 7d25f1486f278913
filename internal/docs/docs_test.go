package docs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"
	"testing"
	"testing/fstest"
	"unicode"
)

// maxReadmeLines is issue 32's bound: README.md is the newcomer's page; the
// rest lives under docs/.
const maxReadmeLines = 250

// errDocs is what every finding wraps, so a test of the checker can tell a
// finding from a failure to read.
var errDocs = errors.New("docs check")

// repo is the repository root as a file system: the tests run in
// internal/docs.
func repo(t *testing.T) fs.FS {
	t.Helper()
	if _, err := os.Stat("../../go.mod"); err != nil {
		t.Fatalf("repository root not found from the test's directory: %v", err)
	}
	return os.DirFS("../..")
}

// documents lists README.md and every markdown file under docs/, sorted.
func documents(fsys fs.FS) ([]string, error) {
	docs := []string{"README.md"}
	err := fs.WalkDir(fsys, "docs", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			docs = append(docs, p)
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("listing docs/: %w", err)
	}
	sort.Strings(docs[1:])
	return docs, nil
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	inlineCode = regexp.MustCompile("`+[^`]*`+")
	// A markdown link or image: [text](target) or [text](target "title").
	link    = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	heading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// prose returns a document's lines outside code fences, with inline code
// removed, numbered from 1: links and headings are read from prose only.
func prose(text string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			in = !in
			out = append(out, "")
			continue
		}
		if in {
			out = append(out, "")
			continue
		}
		out = append(out, inlineCode.ReplaceAllString(l, ""))
	}
	return out
}

// slug is GitHub's anchor for a heading: lower case, everything but letters,
// digits, spaces, hyphens and underscores dropped, spaces made hyphens.
func slug(h string) string {
	// Links in a heading count by their text.
	h = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a markdown document's headings, with
// GitHub's -1, -2, ... for repeated ones.
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	in := false
	for _, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		m := heading.FindStringSubmatch(l)
		if in || m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// checkLinks returns one error per relative link of the documents that does
// not resolve to a file of fsys, leaves it, or names a heading the target
// markdown file lacks.
func checkLinks(fsys fs.FS, docs []string) []error {
	var errs []error
	texts := map[string]string{}
	read := func(p string) (string, error) {
		if s, ok := texts[p]; ok {
			return s, nil
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return "", err
		}
		texts[p] = string(b)
		return string(b), nil
	}
	for _, doc := range docs {
		text, err := read(doc)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %v", errDocs, doc, err))
			continue
		}
		for i, l := range prose(text) {
			for _, m := range link.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				where := fmt.Sprintf("%s:%d: link %q", doc, i+1, target)
				file, frag, _ := strings.Cut(target, "#")
				p := doc
				if file != "" {
					if strings.HasPrefix(file, "/") {
						errs = append(errs, fmt.Errorf("%w: %s: absolute path; make it relative", errDocs, where))
						continue
					}
					p = path.Join(path.Dir(doc), file)
					if p == ".." || strings.HasPrefix(p, "../") {
						errs = append(errs, fmt.Errorf("%w: %s: leaves the repository", errDocs, where))
						continue
					}
					if _, err := fs.Stat(fsys, p); err != nil {
						errs = append(errs, fmt.Errorf("%w: %s: no such file %s", errDocs, where, p))
						continue
					}
				}
				if frag == "" || !strings.HasSuffix(p, ".md") {
					continue
				}
				t, err := read(p)
				if err != nil {
					errs = append(errs, fmt.Errorf("%w: %s: %v", errDocs, where, err))
					continue
				}
				if !anchors(t)[frag] {
					errs = append(errs, fmt.Errorf("%w: %s: %s has no heading #%s", errDocs, where, p, frag))
				}
			}
		}
	}
	return errs
}

// checkNoShared returns one error per document line that points at
// ../shared, the project's notes outside the repository, which a reader of
// the repository does not have.
func checkNoShared(fsys fs.FS, docs []string) []error {
	var errs []error
	for _, doc := range docs {
		b, err := fs.ReadFile(fsys, doc)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %v", errDocs, doc, err))
			continue
		}
		for i, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "../shared") {
				errs = append(errs, fmt.Errorf("%w: %s:%d: refers to ../shared, outside the repository", errDocs, doc, i+1))
			}
		}
	}
	return errs
}

var (
	makeUse  = regexp.MustCompile(`\bmake\s+((?:[A-Z_]+=\S+\s+)*)([a-z][a-z0-9_-]*)`)
	makeRule = regexp.MustCompile(`^([A-Za-z0-9_.%/-]+(?:\s+[A-Za-z0-9_.%/-]+)*)\s*:([^=]|$)`)
)

// makeTargets returns the explicit targets of a Makefile.
func makeTargets(makefile string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(makefile, "\n") {
		if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "#") {
			continue
		}
		if m := makeRule.FindStringSubmatch(l); m != nil {
			for _, t := range strings.Fields(m[1]) {
				out[t] = true
			}
		}
	}
	return out
}

// checkMakeTargets returns one error per `make X` in text's code (inline
// code spans and fenced blocks; prose such as "make target" is English)
// whose X is not a target of the Makefile.
func checkMakeTargets(text, makefile string) []error {
	targets := makeTargets(makefile)
	var errs []error
	in := false
	for n, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		code := []string{l}
		if !in {
			code = inlineCode.FindAllString(l, -1)
		}
		for _, c := range code {
			for _, m := range makeUse.FindAllStringSubmatch(c, -1) {
				if !targets[m[2]] {
					errs = append(errs, fmt.Errorf("%w: README.md:%d: make %s: no such target in the Makefile", errDocs, n+1, m[2]))
				}
			}
		}
	}
	return errs
}

func report(t *testing.T, errs []error) {
	t.Helper()
	for _, err := range errs {
		t.Error(err)
	}
}

func TestReadmeLength(t *testing.T) {
	b, err := fs.ReadFile(repo(t), "README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move detail into docs/ and link to it", n, maxReadmeLines)
	}
}

func TestLinksResolve(t *testing.T) {
	fsys := repo(t)
	docs, err := documents(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 2 {
		t.Fatalf("found %v: want README.md and docs/*.md", docs)
	}
	report(t, checkLinks(fsys, docs))
}

func TestNoSharedPaths(t *testing.T) {
	fsys := repo(t)
	docs, err := documents(fsys)
	if err != nil {
		t.Fatal(err)
	}
	report(t, checkNoShared(fsys, docs))
}

func TestMakeTargetsExist(t *testing.T) {
	fsys := repo(t)
	readme, err := fs.ReadFile(fsys, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	mk, err := fs.ReadFile(fsys, "Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "make ") {
		t.Fatal("README.md names no make target: the check would pass on nothing")
	}
	report(t, checkMakeTargets(string(readme), string(mk)))
}

// TestCheckersFind shows each check failing on a document that breaks it,
// so that a pass above means something.
func TestCheckersFind(t *testing.T) {
	fsys := fstest.MapFS{
		"README.md": {Data: []byte("# Top\n\n" +
			"[ok](docs/a.md) [ok anchor](docs/a.md#the-planners-map) [self](#top)\n" +
			"[missing](docs/gone.md)\n" +
			"[bad anchor](docs/a.md#nowhere)\n" +
			"[outside](../shared/ARCHITECTURE.md)\n" +
			"`[in code](docs/gone.md)`\n" +
			"```\n[in a fence](docs/gone.md)\n```\n" +
			"[web](https://example.org/x)\n" +
			"`make run` and `make bench-nothing`; make target is prose\n" +
			"```sh\nSIM=x make testnet N=8 && make nothing-either\n```\n")},
		"docs/a.md":    {Data: []byte("# A\n\n## The planner's map\n\n[up](../README.md#top) [img](pic.png)\n")},
		"docs/pic.png": {Data: []byte{0}},
	}
	docs, err := documents(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"README.md", "docs/a.md"}; strings.Join(docs, ",") != strings.Join(want, ",") {
		t.Fatalf("documents: %v, want %v", docs, want)
	}
	errs := checkLinks(fsys, docs)
	var got []string
	for _, err := range errs {
		if !errors.Is(err, errDocs) {
			t.Errorf("%v does not wrap errDocs", err)
		}
		got = append(got, err.Error())
	}
	wants := []string{`"docs/gone.md": no such file`, `"docs/a.md#nowhere": docs/a.md has no heading #nowhere`, `"../shared/ARCHITECTURE.md": leaves the repository`}
	if len(got) != len(wants) {
		t.Fatalf("link findings:\n%s\nwant %d", strings.Join(got, "\n"), len(wants))
	}
	for i, w := range wants {
		if !strings.Contains(got[i], w) {
			t.Errorf("finding %d: %q, want it to contain %q", i, got[i], w)
		}
	}
	if errs := checkNoShared(fsys, docs); len(errs) != 1 || !strings.Contains(errs[0].Error(), "README.md:6") {
		t.Errorf("../shared findings: %v, want one on README.md:6", errs)
	}
	mk := ".PHONY: run\nrun: build\n\tgo run .\nBENCH ?= x\nbench:\n"
	errs = checkMakeTargets(string(fsys["README.md"].Data), mk+"testnet: build\n")
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), "make bench-nothing") || !strings.Contains(errs[1].Error(), "make nothing-either") {
		t.Errorf("make findings: %v, want bench-nothing and nothing-either", errs)
	}
	if errs := checkMakeTargets("`SIM=x make testnet N=8`; `make stop`", "testnet stop: build\n"); len(errs) != 0 {
		t.Errorf("make findings on good text: %v", errs)
	}
}

func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"Getting models (`strata model pull`)":      "getting-models-strata-model-pull",
		"The ggml backend (GPU nodes, in progress)": "the-ggml-backend-gpu-nodes-in-progress",
		"Trust: spot checks and eviction":           "trust-spot-checks-and-eviction",
		"Non-deterministic engines (GPU)":           "non-deterministic-engines-gpu",
		"2026-11-26: queue_timeout":                 "2026-11-26-queue_timeout",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
}
