package store

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// Kind says where a reference points.
type Kind int

const (
	// KindHub is a Hugging Face hub repository: hf://OWNER/REPO[/FILE.gguf]
	// or OWNER/REPO:QUANT.
	KindHub Kind = iota + 1
	// KindURL is a plain http(s) URL of one file.
	KindURL
)

// Ref is a parsed model reference.
type Ref struct {
	Kind Kind
	// Repo is OWNER/REPO (hub references).
	Repo string
	// File is the file's path inside the repository, empty when the file
	// is chosen by Quant or is the repository's only GGUF.
	File string
	// Quant is the quantization name to pick the file by, lower case.
	Quant string
	// URL is the address of a KindURL reference.
	URL string
}

// Name is the reference's canonical spelling, the key of the store's name
// index: OWNER/REPO:quant, hf://OWNER/REPO/FILE, hf://OWNER/REPO, or the URL
// without its query (which may carry a signature).
func (r Ref) Name() string {
	switch r.Kind {
	case KindHub:
		switch {
		case r.File != "":
			return "hf://" + r.Repo + "/" + r.File
		case r.Quant != "":
			return r.Repo + ":" + r.Quant
		default:
			return "hf://" + r.Repo
		}
	case KindURL:
		u, err := url.Parse(r.URL)
		if err != nil {
			return r.URL
		}
		u.RawQuery, u.Fragment, u.User = "", "", nil
		return u.String()
	}
	return ""
}

func (r Ref) String() string { return r.Name() }

// hubName is one path element of a hub repository id: the hub allows
// letters, digits, '-', '_' and '.', not starting with '.' or '-'... and
// forbids "..". We check the characters and the dot rules that matter for
// building paths safely.
var hubName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$`)

// quantName is a quantization label such as q4_k_m, Q8_0, IQ4_XS, f16, bf16.
var quantName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$`)

// ParseRef parses a model reference:
//
//	hf://OWNER/REPO                 the repository's only GGUF model
//	hf://OWNER/REPO/FILE.gguf       that file (a split model's first part pulls every part)
//	hf://OWNER/REPO:QUANT           same as OWNER/REPO:QUANT
//	OWNER/REPO:QUANT                the file whose name carries QUANT (case-insensitive)
//	https://host/path/file.gguf     a plain URL
//
// Every error wraps ErrBadRef.
func ParseRef(s string) (Ref, error) {
	bad := func(why string) (Ref, error) {
		return Ref{}, fmt.Errorf("%w %q: %s", ErrBadRef, s, why)
	}
	if s == "" {
		return bad("empty")
	}
	if len(s) > 2048 {
		return bad("longer than 2048 bytes")
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f || c == ' ' {
			return bad("contains a space or control character")
		}
	}
	lower := strings.ToLower(s)
	switch {
	case strings.HasPrefix(lower, "https://"), strings.HasPrefix(lower, "http://"):
		u, err := url.Parse(s)
		if err != nil {
			return bad(err.Error())
		}
		if u.Host == "" {
			return bad("URL has no host")
		}
		if u.Path == "" || strings.HasSuffix(u.Path, "/") {
			return bad("URL names no file")
		}
		return Ref{Kind: KindURL, URL: s}, nil
	case strings.HasPrefix(lower, "hf://"):
		rest := s[len("hf://"):]
		repoPart, quant, hasQuant := strings.Cut(rest, ":")
		elems := strings.Split(repoPart, "/")
		if len(elems) < 2 {
			return bad("want hf://OWNER/REPO[/FILE.gguf]")
		}
		r := Ref{Kind: KindHub}
		var err error
		if r.Repo, err = checkRepo(elems[0], elems[1]); err != nil {
			return bad(err.Error())
		}
		if len(elems) > 2 {
			if hasQuant {
				return bad("give a file or a :QUANT, not both")
			}
			file := strings.Join(elems[2:], "/")
			if err := checkFile(file); err != nil {
				return bad(err.Error())
			}
			r.File = file
		}
		if hasQuant {
			if !quantName.MatchString(quant) {
				return bad("bad quant name " + strconv.Quote(quant))
			}
			r.Quant = strings.ToLower(quant)
		}
		return r, nil
	case strings.Contains(s, "://"):
		return bad("unknown scheme (want hf://, https:// or OWNER/REPO:QUANT)")
	}
	repoPart, quant, ok := strings.Cut(s, ":")
	if !ok {
		return bad("want OWNER/REPO:QUANT, hf://OWNER/REPO[/FILE.gguf] or an https:// URL")
	}
	elems := strings.Split(repoPart, "/")
	if len(elems) != 2 {
		return bad("want OWNER/REPO:QUANT")
	}
	repo, err := checkRepo(elems[0], elems[1])
	if err != nil {
		return bad(err.Error())
	}
	if !quantName.MatchString(quant) {
		return bad("bad quant name " + strconv.Quote(quant))
	}
	return Ref{Kind: KindHub, Repo: repo, Quant: strings.ToLower(quant)}, nil
}

func checkRepo(owner, name string) (string, error) {
	for _, e := range []string{owner, name} {
		if !hubName.MatchString(e) || strings.Contains(e, "..") {
			return "", fmt.Errorf("bad repository name element %q", e)
		}
	}
	return owner + "/" + name, nil
}

// checkFile accepts a relative path inside a repository, with no empty,
// "." or ".." elements, so that it can never climb out of a directory.
func checkFile(file string) error {
	if file == "" || strings.HasPrefix(file, "/") {
		return fmt.Errorf("bad file %q", file)
	}
	for _, e := range strings.Split(file, "/") {
		if e == "" || e == "." || e == ".." || strings.ContainsAny(e, "\\?#%") {
			return fmt.Errorf("bad file path element %q", e)
		}
	}
	if path.Clean(file) != file {
		return fmt.Errorf("file path %q is not clean", file)
	}
	return nil
}

// splitRe matches llama.cpp's split file names: PREFIX-00001-of-00003.gguf.
var splitRe = regexp.MustCompile(`^(.*)-([0-9]{5})-of-([0-9]{5})\.gguf$`)

// splitParts returns every part's file name when file is part of a split
// model, or nil when it is a whole file.
func splitParts(file string) ([]string, error) {
	m := splitRe.FindStringSubmatch(file)
	if m == nil {
		return nil, nil
	}
	n, _ := strconv.Atoi(m[3])
	k, _ := strconv.Atoi(m[2])
	if n < 1 || k < 1 || k > n {
		return nil, fmt.Errorf("%w: split file %q: part %d of %d", ErrBadRef, file, k, n)
	}
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("%s-%05d-of-%05d.gguf", m[1], i+1, n)
	}
	return parts, nil
}
