package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nikolalohinski/gonja/v2"
	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
)

var (
	// ErrChatTemplate reports a tokenizer.chat_template that does not
	// parse or fails to render.
	ErrChatTemplate = errors.New("engine: chat template failed")
	// ErrChatRejected reports a chat the template itself refused through
	// raise_exception (such as roles that do not alternate); the message
	// is the template's.
	ErrChatRejected = errors.New("engine: chat template rejected the chat")
)

// ChatRequest is what a chat template renders: OpenAI-shaped messages
// (role, content, and whatever else the template reads, such as
// tool_calls), the tools offered, and template variables.
type ChatRequest struct {
	// Messages and Tools hold JSON values: map[string]any objects, or the
	// key-ordered objects of ParseChatRequest, which tojson prints in
	// their order as Python would.
	Messages            []any
	Tools               []any // nil: the template sees no tools variable
	AddGenerationPrompt bool
	Extra               map[string]any // more variables, such as enable_thinking
	Now                 time.Time      // what strftime_now formats
}

// chatTemplate is a parsed tokenizer.chat_template.
type chatTemplate struct {
	once sync.Once
	src  string
	tpl  *exec.Template
	err  error
}

// HasChatTemplate reports whether the file carries its own chat template.
func (t *Tokenizer) HasChatTemplate() bool { return t.chat != nil && t.chat.src != "" }

// RenderChat renders the file's tokenizer.chat_template as Hugging Face's
// apply_chat_template does: Jinja with trim_blocks and lstrip_blocks,
// bos_token and eos_token set to the vocabulary's, strftime_now and
// raise_exception defined. Without a template it falls back to the
// built-in format of ChatPrompt (role and content only).
func (t *Tokenizer) RenderChat(r ChatRequest) (string, error) {
	if !t.HasChatTemplate() {
		msgs := make([]Message, len(r.Messages))
		for i, m := range r.Messages {
			msgs[i].Role, _ = jsonField(m, "role").(string)
			msgs[i].Content, _ = jsonField(m, "content").(string)
		}
		return t.ChatPrompt(msgs), nil
	}
	c := t.chat
	c.once.Do(func() {
		src := c.src
		if s, ok := keepMidLineSpace(src); ok {
			src = s
		}
		c.tpl, c.err = parseChatTemplate(src)
		if c.err == nil {
			return
		}
		// Only a template gonja refuses is rewritten (see hoistConditionals);
		// if that fails too, the original error is the one to report.
		if h, ok := hoistConditionals(src); ok && h != src {
			if tpl, err := parseChatTemplate(h); err == nil {
				c.tpl, c.err = tpl, nil
			}
		}
	})
	if c.err != nil {
		return "", fmt.Errorf("%w: parse: %v", ErrChatTemplate, c.err)
	}
	var raised *string
	vars := map[string]any{}
	for k, v := range r.Extra {
		vars[k] = v
	}
	vars["messages"] = toJinja(r.Messages)
	vars["add_generation_prompt"] = r.AddGenerationPrompt
	vars["bos_token"] = t.specialText(t.bos)
	vars["eos_token"] = t.specialText(t.eos)
	if r.Tools != nil {
		vars["tools"] = toJinja(r.Tools)
	}
	now := r.Now
	vars["strftime_now"] = func(format string) string { return strftime(now, format) }
	vars["raise_exception"] = func(msg string) (string, error) {
		raised = &msg
		return "", errors.New(msg)
	}
	out, err := c.tpl.ExecuteToString(exec.NewContext(vars))
	switch {
	case raised != nil:
		return "", fmt.Errorf("%w: %s", ErrChatRejected, *raised)
	case err != nil:
		return "", fmt.Errorf("%w: %v", ErrChatTemplate, err)
	}
	return out, nil
}

// parseChatTemplate parses src as Hugging Face configures Jinja.
func parseChatTemplate(src string) (*exec.Template, error) {
	cfg := config.New()
	cfg.TrimBlocks, cfg.LeftStripBlocks = true, true
	loader, err := loaders.NewShiftedLoader("chat_template", strings.NewReader(src), nil)
	if err != nil {
		return nil, err
	}
	return exec.NewTemplate("chat_template", cfg, loader, chatEnvironment)
}

func (t *Tokenizer) specialText(id int32) string {
	if id < 0 {
		return ""
	}
	return t.tokens[id]
}

// strftime formats the directives chat templates use (C locale).
func strftime(tm time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			b.WriteByte(format[i])
			continue
		}
		i++
		switch format[i] {
		case 'd':
			fmt.Fprintf(&b, "%02d", tm.Day())
		case 'm':
			fmt.Fprintf(&b, "%02d", int(tm.Month()))
		case 'Y':
			fmt.Fprintf(&b, "%d", tm.Year())
		case 'b':
			b.WriteString(tm.Month().String()[:3])
		case 'B':
			b.WriteString(tm.Month().String())
		case 'H':
			fmt.Fprintf(&b, "%02d", tm.Hour())
		case 'M':
			fmt.Fprintf(&b, "%02d", tm.Minute())
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}

// ParseChatRequest reads a chat as `strata debug chat-template --chat`
// takes it: {"messages": [...], "tools": [...] or null,
// "add_generation_prompt": bool, "extra": {...}, "now": "2024-07-26"}.
// Without "now", strftime_now sees the current date.
func ParseChatRequest(data []byte) (ChatRequest, error) {
	var c struct {
		Messages            json.RawMessage `json:"messages"`
		Tools               json.RawMessage `json:"tools"`
		AddGenerationPrompt bool            `json:"add_generation_prompt"`
		Extra               map[string]any  `json:"extra"`
		Now                 string          `json:"now"`
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		return ChatRequest{}, fmt.Errorf("%w: chat case: %v", ErrInput, err)
	}
	r := ChatRequest{AddGenerationPrompt: c.AddGenerationPrompt, Extra: c.Extra, Now: time.Now().UTC()}
	for _, f := range []struct {
		raw json.RawMessage
		dst *[]any
	}{{c.Messages, &r.Messages}, {c.Tools, &r.Tools}} {
		if len(f.raw) == 0 || string(f.raw) == "null" {
			continue
		}
		v, err := orderedJSON(f.raw)
		if err != nil {
			return ChatRequest{}, err
		}
		var ok bool
		if *f.dst, ok = v.([]any); !ok {
			return ChatRequest{}, fmt.Errorf("%w: chat case: messages and tools must be arrays", ErrInput)
		}
	}
	if len(r.Messages) == 0 {
		return ChatRequest{}, fmt.Errorf("%w: chat case: no messages", ErrInput)
	}
	if c.Now != "" {
		var err error
		if r.Now, err = time.Parse(time.DateOnly, c.Now); err != nil {
			return ChatRequest{}, fmt.Errorf("%w: chat case: now %q is not YYYY-MM-DD", ErrInput, c.Now)
		}
	}
	return r, nil
}

// chatEnvironment is gonja's default environment with tojson as Hugging
// Face's: Python's json.dumps separators (", ", ": "), keys in their order,
// non-ASCII text as is.
var chatEnvironment = func() *exec.Environment {
	env := *gonja.DefaultEnvironment
	env.Filters = exec.NewFilterSet(map[string]exec.FilterFunction{}).Update(builtins.Filters)
	if err := env.Filters.Replace("tojson", filterToJSON); err != nil {
		panic(err)
	}
	for _, name := range listFilters {
		if f, ok := env.Filters.Get(name); ok {
			if err := env.Filters.Replace(name, returnJinjaList(f)); err != nil {
				panic(err)
			}
		}
	}
	if err := env.Filters.Replace("trim", filterTrim); err != nil {
		panic(err)
	}
	env.Methods.Dict = orderedDictMethods(env.Methods.Dict)
	env.Methods.Str = pyStrMethods(env.Methods.Str)
	return &env
}()

// orderedDictMethods is gonja's dict methods with keys(), values() and
// items() in the dict's own key order, as Python's are: gonja hands
// methods a Go map and sorts its keys, and a template that prints
// tool.items() (Mistral's) would list the schema's fields alphabetically.
func orderedDictMethods(def *exec.MethodSet[map[string]any]) *exec.MethodSet[map[string]any] {
	m := map[string]exec.Method[map[string]any]{}
	for _, name := range []string{"get", "pop", "setdefault", "update", "copy", "clear", "keys", "values", "items"} {
		if f, ok := def.Get(name); ok {
			m[name] = f
		}
	}
	ordered := func(name string, pick func(p *exec.Pair) any) {
		fallback := m[name]
		m[name] = func(self map[string]any, selfValue *exec.Value, args *exec.VarArgs) (any, error) {
			d, ok := selfValue.Interface().(*exec.Dict)
			if !ok {
				return fallback(self, selfValue, args)
			}
			if err := args.Take(); err != nil {
				return nil, exec.ErrInvalidCall(err)
			}
			out := make([]any, 0, len(d.Pairs))
			for _, p := range d.Pairs {
				out = append(out, pick(p))
			}
			return out, nil
		}
	}
	ordered("keys", func(p *exec.Pair) any { return p.Key })
	ordered("values", func(p *exec.Pair) any { return p.Value })
	ordered("items", func(p *exec.Pair) any { return []any{p.Key, p.Value} })
	return exec.NewMethodSet(m)
}

func filterToJSON(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	var indent *exec.Value
	if err := params.Take(exec.KeywordArgument("indent", exec.AsValue(nil), func(v *exec.Value) error { indent = v; return nil })); err != nil {
		return exec.AsValue(exec.ErrInvalidCall(err))
	}
	pad := ""
	if !indent.IsNil() {
		pad = strings.Repeat(" ", indent.Integer())
	}
	var b strings.Builder
	if err := writePyJSON(&b, in.Interface(), pad, "\n"); err != nil {
		return exec.AsValue(err)
	}
	return exec.AsSafeValue(b.String())
}

// writePyJSON writes v as Python's json.dumps(v, ensure_ascii=False) does,
// indented by pad per level when pad is not empty.
func writePyJSON(b *strings.Builder, v any, pad, nl string) error {
	open := func(c byte, n int) string {
		b.WriteByte(c)
		if pad != "" && n > 0 {
			nl += pad
			b.WriteString(nl)
			return "," + nl
		}
		return ", "
	}
	closing := func(c byte, n int) {
		if pad != "" && n > 0 {
			nl = nl[:len(nl)-len(pad)]
			b.WriteString(nl)
		}
		b.WriteByte(c)
	}
	colon := ": "
	switch x := v.(type) {
	case *exec.Value:
		return writePyJSON(b, x.Interface(), pad, nl)
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(map[bool]string{true: "true", false: "false"}[x])
	case string:
		writePyString(b, x)
	case float64:
		b.WriteString(pyFloat(x))
	case float32:
		b.WriteString(pyFloat(float64(x)))
	case int, int64, int32, json.Number:
		fmt.Fprint(b, x)
	case *exec.Dict:
		sep := open('{', len(x.Pairs))
		for i, p := range x.Pairs {
			if i > 0 {
				b.WriteString(sep)
			}
			if err := writePyJSON(b, p.Key.String(), pad, nl); err != nil {
				return err
			}
			b.WriteString(colon)
			if err := writePyJSON(b, p.Value, pad, nl); err != nil {
				return err
			}
		}
		closing('}', len(x.Pairs))
	case map[string]any:
		d := &exec.Dict{}
		for _, k := range slices.Sorted(maps.Keys(x)) {
			d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue(k), Value: exec.AsValue(x[k])})
		}
		return writePyJSON(b, d, pad, nl)
	case jinjaList:
		return writePyJSON(b, []any(x), pad, nl)
	case []any:
		sep := open('[', len(x))
		for i, e := range x {
			if i > 0 {
				b.WriteString(sep)
			}
			if err := writePyJSON(b, e, pad, nl); err != nil {
				return err
			}
		}
		closing(']', len(x))
	default:
		return fmt.Errorf("%w: tojson: cannot encode %T", ErrChatTemplate, v)
	}
	return nil
}

// writePyString writes s as a JSON string as Python's json.dumps with
// ensure_ascii=False does: only quotes, backslashes and control
// characters escaped (U+2028 and U+2029 stay as they are, where Go's
// encoder escapes them).
func writePyString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r) // invalid UTF-8 becomes U+FFFD
			}
		}
	}
	b.WriteByte('"')
}

// pyFloat is Python's repr of a float, which json.dumps writes: the
// shortest digits that read back the same, in positional form with at
// least one decimal ("2.0", "1500000.5") unless the exponent is below -4
// or above 15 ("1e-05", "1e+16").
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // [-]d[.ddd]e±XX
	mant, exps, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(exps)
	sign := ""
	if strings.HasPrefix(mant, "-") {
		sign, mant = "-", mant[1:]
	}
	digits := strings.Replace(mant, ".", "", 1)
	if exp < -4 || exp >= 16 {
		if exp < 0 {
			return fmt.Sprintf("%s%se-%02d", sign, mant, -exp)
		}
		return fmt.Sprintf("%s%se+%02d", sign, mant, exp)
	}
	point := exp + 1 // digits before the decimal point
	switch {
	case point <= 0:
		return sign + "0." + strings.Repeat("0", -point) + digits
	case point >= len(digits):
		return sign + digits + strings.Repeat("0", point-len(digits)) + ".0"
	}
	return sign + digits[:point] + "." + digits[point:]
}

// orderedJSON decodes JSON keeping the order of object keys (as *exec.Dict)
// and whole numbers as int, as Python's json.loads does.
func orderedJSON(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var val func() (any, error)
	val = func() (any, error) {
		tok, err := d.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: chat case: %v", ErrInput, err)
		}
		switch x := tok.(type) {
		case json.Delim:
			if x == '[' {
				list := []any{}
				for d.More() {
					e, err := val()
					if err != nil {
						return nil, err
					}
					list = append(list, e)
				}
				_, err := d.Token()
				return list, err
			}
			dict := &exec.Dict{Pairs: []*exec.Pair{}}
			for d.More() {
				k, err := d.Token()
				if err != nil {
					return nil, fmt.Errorf("%w: chat case: %v", ErrInput, err)
				}
				e, err := val()
				if err != nil {
					return nil, err
				}
				dict.Pairs = append(dict.Pairs, &exec.Pair{Key: exec.AsValue(k), Value: exec.AsValue(e)})
			}
			_, err := d.Token()
			if len(dict.Pairs) == 0 {
				return emptyObject(), err
			}
			return dict, err
		case json.Number:
			if i, err := x.Int64(); err == nil {
				return int(i), nil
			}
			f, err := x.Float64()
			return f, err
		}
		return tok, nil
	}
	return val()
}

// toJinja turns map[string]any objects into key-sorted *exec.Dict values,
// so that templates see one kind of object.
func toJinja(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			return emptyObject()
		}
		d := &exec.Dict{Pairs: []*exec.Pair{}}
		for _, k := range slices.Sorted(maps.Keys(x)) {
			d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue(k), Value: exec.AsValue(toJinja(x[k]))})
		}
		return d
	case []any:
		out := make(jinjaList, len(x))
		for i, e := range x {
			out[i] = toJinja(e)
		}
		return out
	}
	return v
}

// emptyObject is {} as templates see it: a Go map, which gonja (v2.9.1)
// finds false as Jinja does, where it finds every *exec.Dict true. gpt-oss's
// template tests `tool.parameters.properties` to write a tool without
// parameters as "() => any".
func emptyObject() map[string]any { return map[string]any{} }

// jinjaList is a template's list whose negative indices reach its first
// item: gonja v2.9.1 finds nothing at l[-n] when n is l's length (it
// tests len > -n), so in a one-message chat Mistral Nemo's
// `message == user_messages[-1]` was false and its template never showed
// the tools. Lists the server passes in, and those the list-making
// filters return (listFilters), are jinjaLists; a list sliced in the
// template (messages[1:]) is gonja's own until a filter makes it one.
type jinjaList []any

// GetItem implements exec.ItemGetter, which gonja asks before its own
// indexing.
func (l jinjaList) GetItem(key any) (*exec.Value, bool) {
	i, ok := key.(int)
	if !ok {
		return exec.AsValue(nil), false
	}
	if i < 0 {
		i += len(l)
	}
	if i < 0 || i >= len(l) {
		return exec.AsValue(nil), false
	}
	return exec.ToValue(l[i]), true
}

// listFilters are the filters that make lists; chatEnvironment wraps
// them to return jinjaLists.
var listFilters = []string{"list", "selectattr", "rejectattr", "select", "reject", "map", "sort", "reverse", "unique", "batch", "slice"}

func returnJinjaList(f exec.FilterFunction) exec.FilterFunction {
	return func(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
		out := f(e, in, params)
		if l, ok := out.Interface().([]any); ok {
			return exec.AsValue(jinjaList(l))
		}
		return out
	}
}

// jsonField is the value of key in a JSON object of either kind (nil when
// absent).
func jsonField(obj any, key string) any {
	switch x := obj.(type) {
	case map[string]any:
		return x[key]
	case *exec.Dict:
		return x.Get(exec.AsValue(key)).Interface()
	}
	return nil
}

// chatMessages are msgs as templates read them: objects with role and
// content, and OpenAI's tool fields where set, the arguments of a tool
// call parsed into an object (as Hugging Face's templates expect; kept as
// text when they are not JSON).
//
// With asSent, the calls keep OpenAI's form: arguments as the JSON text
// and, for an assistant message with calls and no text, a null content.
// DeepSeek V3's template needs that: it renders an assistant's calls
// only when its content is none, and concatenates the arguments as text.
func chatMessages(msgs []Message, asSent bool) []any {
	out := make([]any, len(msgs))
	for i, m := range msgs {
		d := &exec.Dict{}
		add := func(k string, v any) {
			d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue(k), Value: exec.AsValue(v)})
		}
		add("role", m.Role)
		if asSent && m.Content == "" && len(m.ToolCalls) > 0 {
			add("content", nil)
		} else {
			add("content", m.Content)
		}
		if len(m.ToolCalls) > 0 {
			calls := make(jinjaList, len(m.ToolCalls))
			for j, c := range m.ToolCalls {
				var args any = c.Function.Arguments
				if v, err := orderedJSON([]byte(c.Function.Arguments)); err == nil && !asSent {
					args = v
				}
				fn := &exec.Dict{Pairs: []*exec.Pair{{Key: exec.AsValue("name"), Value: exec.AsValue(c.Function.Name)}, {Key: exec.AsValue("arguments"), Value: exec.AsValue(args)}}}
				call := &exec.Dict{}
				if c.ID != "" {
					call.Pairs = append(call.Pairs, &exec.Pair{Key: exec.AsValue("id"), Value: exec.AsValue(c.ID)})
				}
				call.Pairs = append(call.Pairs, &exec.Pair{Key: exec.AsValue("type"), Value: exec.AsValue(c.Type)}, &exec.Pair{Key: exec.AsValue("function"), Value: exec.AsValue(fn)})
				calls[j] = call
			}
			add("tool_calls", calls)
		}
		if m.ToolCallID != "" {
			add("tool_call_id", m.ToolCallID)
		}
		if m.Name != "" {
			add("name", m.Name)
		}
		out[i] = d
	}
	return out
}
