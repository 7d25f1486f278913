package engine

import (
	"strings"
	"time"
)

// ToolSyntax names how a model family writes tool calls in its output, as
// its chat template renders an assistant turn that calls tools.
type ToolSyntax string

// The tool-call syntaxes a chat template can be recognised by.
const (
	// ToolsNone: the template renders no tool calls that Strata knows how
	// to read back.
	ToolsNone ToolSyntax = ""
	// ToolsLlama3: Llama 3.1, 3.2 and 3.3 write a call as a JSON object
	// {"name": ..., "parameters": {...}}, optionally after <|python_tag|>.
	ToolsLlama3 ToolSyntax = "llama3-json"
	// ToolsHermes: Qwen2.5 and Qwen3 (Hermes' format) write each call as
	// <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>.
	ToolsHermes ToolSyntax = "hermes"
	// ToolsMistral: Mistral writes [TOOL_CALLS] and a JSON array of
	// {"name", "arguments", "id"} objects, or (newer tokenizers)
	// [TOOL_CALLS]name[ARGS]{...} for each call.
	ToolsMistral ToolSyntax = "mistral"
	// ToolsDeepSeek: DeepSeek V3 and R1 write calls between
	// <｜tool▁calls▁begin｜> and <｜tool▁calls▁end｜>, each
	// <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>.
	ToolsDeepSeek ToolSyntax = "deepseek-v3"
	// ToolsHarmony: gpt-oss (OpenAI's harmony format) writes each call as
	// a message to its recipient on the commentary channel:
	// <|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{...}<|call|>
	// (the recipient may also follow the channel's name).
	ToolsHarmony ToolSyntax = "harmony"
)

// ReasoningSyntax names how a model family sets its thinking apart from
// its answer.
type ReasoningSyntax string

const (
	// ReasoningNone: the output is all answer.
	ReasoningNone ReasoningSyntax = ""
	// ReasoningThink: <think>...</think> before the answer (Qwen3, QwQ,
	// DeepSeek-R1 and its distillations).
	ReasoningThink ReasoningSyntax = "think"
	// ReasoningHarmony: gpt-oss thinks in messages on the analysis
	// channel and answers on the final one (OpenAI's harmony format).
	ReasoningHarmony ReasoningSyntax = "harmony"
)

// ChatSyntax is what a model's chat template says about the shape of the
// model's output: which tool-call syntax and which reasoning markers the
// template renders for an assistant turn. It is read from the template
// itself (and the vocabulary's specials), never guessed from the output.
type ChatSyntax struct {
	Tools     ToolSyntax      `json:"tools,omitempty"`
	Reasoning ReasoningSyntax `json:"reasoning,omitempty"`
	// ThinkingOpen: the template's generation prompt ends inside an open
	// <think> (DeepSeek-R1's), so the output begins in the thinking and
	// may never write the opening tag.
	ThinkingOpen bool `json:"thinking_open,omitempty"`
	// Keep are the markers of these syntaxes that are control tokens in
	// this vocabulary: the output drops a control token's text unless it
	// is asked to keep it, and the parsers need them (Mistral's
	// [TOOL_CALLS] and [ARGS], Llama's <|python_tag|>).
	Keep []string `json:"keep,omitempty"`
}

// Family names the syntaxes for messages: "hermes tool calls, think
// reasoning", or "no tool-call or reasoning syntax".
func (s ChatSyntax) Family() string {
	var parts []string
	if s.Tools != ToolsNone {
		parts = append(parts, string(s.Tools)+" tool calls")
	}
	if s.Reasoning != ReasoningNone {
		parts = append(parts, string(s.Reasoning)+" reasoning")
	}
	if len(parts) == 0 {
		return "no tool-call or reasoning syntax"
	}
	return strings.Join(parts, ", ")
}

// toolMarkers are the marker texts each syntax's parser reads.
var toolMarkers = map[ToolSyntax][]string{
	ToolsLlama3:   {"<|python_tag|>"},
	ToolsHermes:   {"<tool_call>", "</tool_call>"},
	ToolsMistral:  {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"},
	ToolsDeepSeek: {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"},
	ToolsHarmony:  harmonyMarkers,
}

// harmonyMarkers are the control tokens of a harmony message: the parser
// needs them for the reasoning as much as for the calls.
var harmonyMarkers = []string{"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|call|>", "<|return|>"}

// ChatSyntax reads the output syntax of the file's chat template: the
// tool-call format the template renders for an assistant's tool_calls,
// and the reasoning markers it renders or strips. A file without a
// template (the built-in format) has neither.
func (t *Tokenizer) ChatSyntax() ChatSyntax {
	if !t.HasChatTemplate() {
		return ChatSyntax{}
	}
	src := t.chat.src
	var s ChatSyntax
	switch {
	case strings.Contains(src, "<|channel|>"):
		// Harmony's messages carry both the thinking (the analysis
		// channel) and the calls (to=functions.NAME).
		s.Tools, s.Reasoning = ToolsHarmony, ReasoningHarmony
	case strings.Contains(src, "<tool_call>"):
		s.Tools = ToolsHermes
	case strings.Contains(src, "<｜tool▁calls▁begin｜>"):
		s.Tools = ToolsDeepSeek
	case strings.Contains(src, "[TOOL_CALLS]"):
		s.Tools = ToolsMistral
	case strings.Contains(src, "<|start_header_id|>") && strings.Contains(src, `"parameters"`):
		// Llama 3.1's and 3.2's templates write the call as
		// '{"name": "' + name + '", "parameters": ' + arguments | tojson.
		s.Tools = ToolsLlama3
	}
	if s.Reasoning == ReasoningNone && (strings.Contains(src, "<think>") || strings.Contains(src, "</think>")) {
		s.Reasoning = ReasoningThink
		s.ThinkingOpen = t.promptOpensThinking()
	}
	markers := toolMarkers[s.Tools]
	if s.Reasoning == ReasoningThink {
		markers = append(markers[:len(markers):len(markers)], "<think>", "</think>")
	}
	for _, m := range markers {
		for _, id := range t.specials {
			if t.types[id] == tokControl && t.tokens[id] == m {
				s.Keep = append(s.Keep, m)
				break
			}
		}
	}
	return s
}

// promptOpensThinking renders the generation prompt of a one-message chat
// and reports whether it ends in an open <think>.
func (t *Tokenizer) promptOpensThinking() bool {
	p, err := t.RenderChat(ChatRequest{Messages: []any{map[string]any{"role": "user", "content": "Hi"}},
		AddGenerationPrompt: true, Now: time.Now().UTC()})
	if err != nil {
		return false
	}
	return strings.HasSuffix(strings.TrimRight(p, " \t\r\n"), "<think>")
}

// SpecialID is the ID of the control or user-defined token whose text is
// s.
func (t *Tokenizer) SpecialID(s string) (int32, bool) {
	for _, id := range t.specials {
		if t.tokens[id] == s {
			return id, true
		}
	}
	return -1, false
}
