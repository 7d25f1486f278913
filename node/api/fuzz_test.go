package api

import (
	"encoding/json"
	"math"
	"net/http"
	"testing"
)

// The request decoders take any bytes: every input gives either a
// request the node can be handed, or a 400/413 with OpenAI's error JSON
// and a message. Seeds are in testdata/fuzz/.

func checkDecoded(t *testing.T, data []byte, g genRequest, e *apiError) {
	if e != nil {
		if e.Status != http.StatusBadRequest && e.Status != http.StatusRequestEntityTooLarge {
			t.Fatalf("%q: status %d", data, e.Status)
		}
		if e.Message == "" || e.Type != typeInvalid || e.Code == "" {
			t.Fatalf("%q: error %+v", data, e)
		}
		b, err := json.Marshal(e.body())
		if err != nil || !json.Valid(b) {
			t.Fatalf("%q: error body %q: %v", data, b, err)
		}
		return
	}
	r := g.req
	set := 0
	for _, b := range []bool{r.Prompt != "", len(r.Messages) > 0, len(r.Tokens) > 0} {
		if b {
			set++
		}
	}
	sp := r.Sampling
	switch {
	case set != 1:
		t.Fatalf("%q: %d of prompt, messages and tokens set", data, set)
	case g.chat != (len(r.Messages) > 0):
		t.Fatalf("%q: chat %v with %d messages", data, g.chat, len(r.Messages))
	case r.MaxTokens < 0:
		t.Fatalf("%q: max tokens %d", data, r.MaxTokens)
	case math.IsNaN(float64(sp.Temperature)) || sp.Temperature < 0 || sp.Temperature > maxTemperature:
		t.Fatalf("%q: temperature %v", data, sp.Temperature)
	case math.IsNaN(float64(sp.TopP)) || sp.TopP < 0 || sp.TopP > 1:
		t.Fatalf("%q: top_p %v", data, sp.TopP)
	case sp.TopK < 0 || sp.RepeatPenalty < 0:
		t.Fatalf("%q: sampling %+v", data, sp)
	case len(r.Stop) > maxStops:
		t.Fatalf("%q: %d stops", data, len(r.Stop))
	case g.includeUsage && !g.stream:
		t.Fatalf("%q: usage chunk without a stream", data)
	case g.n < 1 || g.n > maxChoices:
		t.Fatalf("%q: n %d", data, g.n)
	case g.logprobs != r.LogProbs || r.TopLogProbs < 0 || r.TopLogProbs > maxChatTopLogprobs ||
		!g.chat && r.TopLogProbs > maxCompletionLogprobs || r.TopLogProbs > 0 && !r.LogProbs:
		t.Fatalf("%q: logprobs %v, top %d", data, r.LogProbs, r.TopLogProbs)
	}
	for _, s := range r.Stop {
		if s == "" || len(s) > maxStopLen {
			t.Fatalf("%q: stop %q", data, s)
		}
	}
	for _, m := range r.Messages {
		switch m.Role {
		case "system", "user", "assistant", "tool":
		default:
			t.Fatalf("%q: role %q", data, m.Role)
		}
	}
	for _, id := range r.Tokens {
		if id < 0 {
			t.Fatalf("%q: token %d", data, id)
		}
	}
}

var fuzzSeeds = []string{
	`{"model":"m","prompt":"Once upon a time","max_tokens":16,"temperature":0.7,"top_p":0.9,"seed":-3,"stop":["\n","."],"stream":true,"stream_options":{"include_usage":true}}`,
	`{"prompt":[1,2,3],"n":1,"logprobs":null,"echo":false}`,
	`{"prompt":[[1,2]],"stop":"x"}`,
	`{"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":null}],"max_completion_tokens":3,"tools":[],"response_format":{"type":"text"}}`,
	`{"messages":[{"role":"developer","content":"d"}],"top_k":-1,"repetition_penalty":1.1}`,
	`{"messages":[{"role":"user","content":"x"}],"max_tokens":1e309}`,
	`{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}`,
	`{"prompt":"x","max_tokens":-1}`,
	`{"prompt":"x","n":2}`,
	`{"prompt":"x","n":9,"logprobs":5}`,
	`{"prompt":"x","logprobs":6}`,
	`{"prompt":"x","logprobs":true}`,
	`{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":20,"n":8,"stream":true}`,
	`{"messages":[{"role":"user","content":"x"}],"logprobs":false,"top_logprobs":2}`,
	`{"messages":[{"role":"user","content":"x"}],"logprobs":1,"top_logprobs":21,"n":0}`,
	`{"prompt":["a","b"]}`,
	`{"prompt":[-1, 4294967296]}`,
	`{"messages":[]}`,
	`{"messages":`,
	`[]`,
	`null`,
	`{}{}`,
	"\xff\xfe{",
}

func FuzzDecodeCompletion(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, e := decodeCompletion(data)
		if e == nil && g.chat {
			t.Fatalf("%q: a completion decoded as a chat", data)
		}
		checkDecoded(t, data, g, e)
	})
}

func FuzzDecodeChat(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, e := decodeChat(data)
		if e == nil && !g.chat {
			t.Fatalf("%q: a chat decoded as a completion", data)
		}
		checkDecoded(t, data, g, e)
	})
}

// Seeds of the Responses and Messages bodies, beside the shared ones.
var endpointSeeds = []string{
	`{"model":"m","input":"hi","instructions":"be brief","max_output_tokens":8,"temperature":0,"stream":true}`,
	`{"input":[{"role":"developer","content":"d"},{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"r"}],"tools":[{"type":"function","name":"f","parameters":{}}]}`,
	`{"input":[{"type":"item_reference","id":"x"}],"previous_response_id":"r"}`,
	`{"model":"m","max_tokens":8,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"hi"}],"stop_sequences":["x"],"top_k":3}`,
	`{"max_tokens":8,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"r"}]}]}],"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"auto"}}`,
	`{"max_tokens":8,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`,
}

func FuzzDecodeResponses(f *testing.F) {
	for _, s := range append(fuzzSeeds, endpointSeeds...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, e := decodeResponses(data)
		if e == nil && (!g.chat || g.shape == nil) {
			t.Fatalf("%q: decoded without its shape", data)
		}
		checkDecoded(t, data, g, e)
	})
}

func FuzzDecodeMessages(f *testing.F) {
	for _, s := range append(fuzzSeeds, endpointSeeds...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, e := decodeMessages(data)
		if e == nil && (!g.chat || g.shape == nil) {
			t.Fatalf("%q: decoded without its shape", data)
		}
		checkDecoded(t, data, g, e)
	})
}
