package api

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// TestStructuredOutputsOfficialClient: the official openai client's
// zodResponseFormat (chat) and zodTextFormat (responses) on a
// random-weight model: 100 of 100 documents are valid against the
// schema the client sent, as ajv (pinned in testdata/openai-client)
// judges them; json_object gives an object; a schema the grammar cannot
// enforce is a 400 naming response_format; forced tool calls (required,
// named; chat and responses) on a model with Hermes syntax call the
// right tool with arguments ajv finds valid; a forced call cut off by
// max_tokens is the same call, whole and streamed, its arguments closed
// into JSON.
func TestStructuredOutputsOfficialClient(t *testing.T) {
	needClient(t, "openai-client", "ajv")
	needClient(t, "openai-client", "zod")
	c := shared.get(t)
	tc, _ := getToolsSwarm(t)
	const docs = 100
	outb := nodeScript(t, "openai-client", "openai", "structured.mjs", c.urls[0]+"/v1", tc.urls[0]+"/v1", "100")
	var got struct {
		Schema json.RawMessage
		Chat   struct {
			Total, Valid, Parsed int
			Finish               map[string]int
			Failures             []json.RawMessage
		}
		Responses struct {
			Status, Text  string
			Valid, Parsed bool
		}
		JSONObject  struct{ Content, Finish string }
		Unsupported struct {
			Status         int
			Param, Message string
		}
		Tools []struct {
			Choice, Want, Finish string
			Content              *string
			Calls                []struct {
				Name, Arguments string
				Valid           bool
			}
		}
		Cut struct {
			Whole, Streamed struct {
				Finish  string
				Content *string
				Calls   []struct{ Name, Arguments string }
			}
			Deltas int
		}
		ResponsesTool struct {
			Status string
			Calls  []struct {
				Name  string
				Valid bool
			}
		}
	}
	if err := json.Unmarshal(outb, &got); err != nil {
		t.Fatalf("client output %q: %v", outb, err)
	}
	t.Logf("schema %s; chat: %d of %d valid, finish %v", got.Schema, got.Chat.Valid, got.Chat.Total, got.Chat.Finish)
	if got.Chat.Total != docs || got.Chat.Valid != docs || got.Chat.Parsed != docs || got.Chat.Finish["stop"] != docs {
		t.Errorf("chat documents: %d of %d valid (%d parsed by zod), finish %v; failures %s", got.Chat.Valid, got.Chat.Total,
			got.Chat.Parsed, got.Chat.Finish, got.Chat.Failures)
	}
	if r := got.Responses; r.Status != "completed" || !r.Valid || !r.Parsed {
		t.Errorf("responses text.format: %+v", r)
	}
	var obj map[string]any
	if got.JSONObject.Finish == "stop" && json.Unmarshal([]byte(got.JSONObject.Content), &obj) != nil {
		t.Errorf("json_object: %q is not an object", got.JSONObject.Content)
	} else if got.JSONObject.Finish == "length" && !strings.HasPrefix(strings.TrimSpace(got.JSONObject.Content), "{") {
		t.Errorf("json_object: %q", got.JSONObject.Content)
	}
	if u := got.Unsupported; u.Status != http.StatusBadRequest || u.Param != "response_format" || !strings.Contains(u.Message, "pattern") {
		t.Errorf("unsupported schema: %+v", u)
	}
	if len(got.Tools) != 3 {
		t.Fatalf("tools: %+v", got.Tools)
	}
	for _, tl := range got.Tools {
		t.Logf("tool_choice %s: %s %+v", tl.Choice, tl.Finish, tl.Calls)
		if tl.Finish != "tool_calls" || len(tl.Calls) != 1 || !tl.Calls[0].Valid || tl.Want != "" && tl.Calls[0].Name != tl.Want ||
			tl.Content != nil && *tl.Content != "" {
			t.Errorf("tool_choice %s (%s): %+v", tl.Choice, tl.Want, tl)
		}
	}
	// A forced call cut off by max_tokens stays a call, with arguments
	// closed into JSON at the last point that allowed it, the same whole
	// and streamed (in several deltas).
	cw, cs := got.Cut.Whole, got.Cut.Streamed
	t.Logf("cut-off call: whole %q; streamed in %d argument deltas %q", cw.Calls, got.Cut.Deltas, cs.Calls)
	if cw.Finish != "length" || len(cw.Calls) != 1 || cw.Calls[0].Name != "get_forecast" || !json.Valid([]byte(cw.Calls[0].Arguments)) ||
		cw.Content != nil && *cw.Content != "" || !reflect.DeepEqual(cw, cs) || got.Cut.Deltas < 2 {
		t.Errorf("cut-off call: whole %+v, streamed %+v in %d deltas", cw, cs, got.Cut.Deltas)
	}
	if r := got.ResponsesTool; r.Status != "completed" || len(r.Calls) != 1 || r.Calls[0].Name != "get_forecast" || !r.Calls[0].Valid {
		t.Errorf("responses named function: %+v", r)
	}
}
