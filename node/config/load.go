package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// ErrInvalid is wrapped by every configuration error.
var ErrInvalid = errors.New("invalid configuration")

// EnvPrefix prefixes the environment variables.
const EnvPrefix = "STRATA_"

// EnvConfig names the config file when --config is not given.
const EnvConfig = EnvPrefix + "CONFIG"

// FlagConfig is the flag naming the config file.
const FlagConfig = "config"

// Source is where a setting's value came from.
type Source int

// Sources, lowest precedence first.
const (
	FromDefault Source = iota
	FromFile
	FromEnv
	FromFlag
)

func (s Source) String() string {
	return [...]string{"default", "file", "environment", "flag"}[s]
}

// FieldError is a bad setting, named as the user wrote it.
type FieldError struct {
	Key    string // the YAML key, such as "max_layers"
	Source Source
	File   string // FromFile: the file
	Line   int    // FromFile: the key's line
	Msg    string
}

// Field is the setting's name in the spelling of its source: --max-layers,
// STRATA_MAX_LAYERS, or node.yaml:7: max_layers.
func (e *FieldError) Field() string {
	switch e.Source {
	case FromFlag:
		return "--" + FlagName(e.Key)
	case FromEnv:
		return EnvName(e.Key)
	case FromFile:
		if e.Line > 0 {
			return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Key)
		}
		return fmt.Sprintf("%s: %s", e.File, e.Key)
	}
	return e.Key
}

func (e *FieldError) Error() string { return fmt.Sprintf("%v: %s: %s", ErrInvalid, e.Field(), e.Msg) }
func (e *FieldError) Unwrap() error { return ErrInvalid }

// FlagName is the flag of a key: "max_layers" → "max-layers".
func FlagName(key string) string { return strings.ReplaceAll(key, "_", "-") }

// EnvName is the environment variable of a key: "max_layers" →
// "STRATA_MAX_LAYERS".
func EnvName(key string) string { return EnvPrefix + strings.ToUpper(key) }

// field is one setting of Config.
type field struct {
	key   string
	index int
	help  string
}

// fields lists Config's settings, in declaration order.
func fields() []field {
	t := reflect.TypeFor[Config]()
	out := make([]field, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		out = append(out, field{key: key, index: i, help: f.Tag.Get("help")})
	}
	return out
}

// bind registers the flag of each field on fs, pointing into c.
func bind(fs *pflag.FlagSet, c *Config) {
	v := reflect.ValueOf(c).Elem()
	for _, f := range fields() {
		name := FlagName(f.key)
		switch p := v.Field(f.index).Addr().Interface().(type) {
		case *string:
			fs.StringVar(p, name, *p, f.help)
		case *[]string:
			fs.StringSliceVar(p, name, *p, f.help)
		case *bool:
			fs.BoolVar(p, name, *p, f.help)
		case *int:
			fs.IntVar(p, name, *p, f.help)
		case *float64:
			fs.Float64Var(p, name, *p, f.help)
		case *time.Duration:
			fs.DurationVar(p, name, *p, f.help)
		case *ByteSize:
			fs.Var(p, name, f.help)
		default:
			panic(fmt.Sprintf("config: no flag type for %s (%T)", f.key, p))
		}
	}
}

type loader struct {
	env      func(string) (string, bool)
	defaults Config
}

// Option configures Bind.
type Option func(*loader)

// WithEnv reads environment variables through lookup (default
// os.LookupEnv); for tests.
func WithEnv(lookup func(string) (string, bool)) Option {
	return func(l *loader) { l.env = lookup }
}

// WithDefaults starts from d instead of Default().
func WithDefaults(d Config) Option {
	return func(l *loader) { l.defaults = d }
}

// Bind registers a flag for every setting, and --config, on cmd, and
// returns the loader to call in cmd's RunE, after cobra has parsed the
// flags: it reads the config file, the environment and the flags, in
// the documented precedence, and validates the result.
func Bind(cmd *cobra.Command, opts ...Option) func() (Config, error) {
	l := &loader{env: os.LookupEnv, defaults: Default()}
	for _, o := range opts {
		o(l)
	}
	flags := l.defaults
	flags.Listen = append([]string(nil), flags.Listen...)
	flags.Bootstrap = append([]string(nil), flags.Bootstrap...)
	flags.DHTBootstrap = append([]string(nil), flags.DHTBootstrap...)
	fs := cmd.Flags()
	bind(fs, &flags)
	var file string
	fs.StringVar(&file, FlagConfig, "", "YAML config file (also "+EnvConfig+"); precedence: flags > "+EnvPrefix+"* environment > file > defaults")
	return func() (Config, error) {
		if !fs.Changed(FlagConfig) {
			file, _ = l.env(EnvConfig)
		}
		return l.load(file, fs, &flags)
	}
}

// load builds the configuration: defaults, then the file, then the
// environment, then the flags that were set.
func (l *loader) load(file string, fs *pflag.FlagSet, flags *Config) (Config, error) {
	c := l.defaults
	c.Listen = append([]string(nil), c.Listen...)
	c.Bootstrap = append([]string(nil), c.Bootstrap...)
	c.DHTBootstrap = append([]string(nil), c.DHTBootstrap...)
	src := map[string]*FieldError{} // where each key that is not a default came from
	if file != "" {
		lines, err := readFile(file, &c)
		if err != nil {
			return c, err
		}
		for k, line := range lines {
			src[k] = &FieldError{Key: k, Source: FromFile, File: file, Line: line}
		}
	}
	// The environment, parsed as its flag would be.
	envFS := pflag.NewFlagSet("env", pflag.ContinueOnError)
	bind(envFS, &c)
	var errs []error
	for _, f := range fields() {
		v, ok := l.env(EnvName(f.key))
		if !ok {
			continue
		}
		if err := envFS.Set(FlagName(f.key), v); err != nil {
			errs = append(errs, &FieldError{Key: f.key, Source: FromEnv, Msg: fmt.Sprintf("%q: %v", v, unwrapFlagErr(err))})
			continue
		}
		src[f.key] = &FieldError{Key: f.key, Source: FromEnv}
	}
	// The flags given, copied from where cobra parsed them.
	if fs != nil && flags != nil {
		cv, fv := reflect.ValueOf(&c).Elem(), reflect.ValueOf(flags).Elem()
		for _, f := range fields() {
			if fs.Changed(FlagName(f.key)) {
				cv.Field(f.index).Set(fv.Field(f.index))
				src[f.key] = &FieldError{Key: f.key, Source: FromFlag}
			}
		}
	}
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	return c, c.validate(src)
}

// unwrapFlagErr drops pflag's wrapping of a value's parse error.
func unwrapFlagErr(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}

// Load reads a configuration without flags: defaults, then file (if not
// ""), then the environment through lookup (nil: none). For tools and
// tests; the node command uses Bind.
func Load(file string, lookup func(string) (string, bool)) (Config, error) {
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	l := &loader{env: lookup, defaults: Default()}
	return l.load(file, nil, nil)
}

var yamlLine = regexp.MustCompile(`^line (\d+): (.*)$`)

// readFile decodes a YAML file over c, refusing unknown keys. It returns
// the line of each top-level key.
func readFile(path string, c *Config) (map[string]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: config file: %w", ErrInvalid, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			return nil, fmt.Errorf("%w: %s:%s: %s", ErrInvalid, path, m[1], m[2])
		}
		return nil, fmt.Errorf("%w: %s: %s", ErrInvalid, path, msg)
	}
	lines := map[string]int{}
	byLine := map[int]string{}
	if len(doc.Content) == 0 {
		return lines, nil // an empty file: all defaults
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w: %s:%d: the file must be a mapping of keys to values", ErrInvalid, path, root.Line)
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k := root.Content[i]
		if _, dup := lines[k.Value]; dup {
			return nil, fmt.Errorf("%w: %s:%d: %s given twice", ErrInvalid, path, k.Line, k.Value)
		}
		lines[k.Value] = k.Line
		// A value's errors are reported on its own lines; map them all to
		// the key.
		for l := k.Line; l <= lastLine(root.Content[i+1]); l++ {
			byLine[l] = k.Value
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, path, err)
		}
		var errs []error
		for _, msg := range te.Errors {
			m := yamlLine.FindStringSubmatch(msg)
			if m == nil {
				errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalid, path, msg))
				continue
			}
			line, _ := strconv.Atoi(m[1])
			text := m[2]
			if name, ok := strings.CutPrefix(text, "field "); ok && strings.Contains(name, " not found in type") {
				name, _, _ = strings.Cut(name, " not found")
				errs = append(errs, &FieldError{Key: name, Source: FromFile, File: path, Line: line, Msg: "unknown key"})
				continue
			}
			key := byLine[line]
			if key == "" {
				key = "?"
			}
			errs = append(errs, &FieldError{Key: key, Source: FromFile, File: path, Line: line, Msg: text})
		}
		return nil, errors.Join(errs...)
	}
	return lines, nil
}

// lastLine is the last line a node spans.
func lastLine(n *yaml.Node) int {
	last := n.Line
	for _, c := range n.Content {
		last = max(last, lastLine(c))
	}
	return last
}
