package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stratanet/strata/node"
)

// fakeStream plays scripted deltas, then its result: the handlers'
// streaming on a fake, with no node behind it.
type fakeStream struct {
	mu     sync.Mutex
	deltas []node.Delta
	res    node.Result
}

func (s *fakeStream) PromptTokens() int { return s.res.Usage.PromptTokens }

func (s *fakeStream) Recv() (node.Delta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.deltas) == 0 {
		return node.Delta{}, io.EOF
	}
	d := s.deltas[0]
	s.deltas = s.deltas[1:]
	return d, nil
}

func (s *fakeStream) Result() (node.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deltas = nil
	return s.res, nil
}

func (s *fakeStream) Close() {}

// streamBackend answers every generation with the same three deltas and
// records the stream each one was asked to follow.
type streamBackend struct {
	*fakeBackend
	mu      sync.Mutex
	made    []Stream
	follows []Stream
}

var fakeWords = []string{"Once", " upon", " a time"}

func (b *streamBackend) Generate(_ context.Context, _ node.Request, follow Stream) (Stream, error) {
	st := &fakeStream{res: node.Result{Text: strings.Join(fakeWords, ""), FinishReason: node.FinishLength,
		Usage: node.Usage{PromptTokens: 5, CompletionTokens: len(fakeWords), TotalTokens: 5 + len(fakeWords)}}}
	for i, w := range fakeWords {
		tok := []int32{int32(10 + i)}
		st.deltas = append(st.deltas, node.Delta{Tokens: tok, Text: w})
		st.res.Tokens = append(st.res.Tokens, tok...)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.made = append(b.made, st)
	b.follows = append(b.follows, follow)
	return st, nil
}

// TestFakeStream: /v1/completions renders a backend's stream, whole and
// as server-sent events, and later choices follow the first's stream;
// no node runs.
func TestFakeStream(t *testing.T) {
	f, _ := newFakeSwarm(t)
	b := &streamBackend{fakeBackend: f}
	u := fakeServer(t, b).URL + "/v1/completions"
	want := strings.Join(fakeWords, "")

	status, _, body := post(t, u, "", map[string]any{"model": "fake-model", "prompt": "hi", "max_tokens": 3, "n": 2})
	if status != http.StatusOK {
		t.Fatalf("whole: %d %s", status, body)
	}
	var whole struct {
		Choices []struct {
			Index        int    `json:"index"`
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &whole); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if len(whole.Choices) != 2 {
		t.Fatalf("%d choices, want 2: %s", len(whole.Choices), body)
	}
	for _, c := range whole.Choices {
		if c.Text != want || c.FinishReason != node.FinishLength {
			t.Errorf("choice %d: %q, %q; want %q, length", c.Index, c.Text, c.FinishReason, want)
		}
	}
	if whole.Usage.PromptTokens != 5 || whole.Usage.CompletionTokens != 2*len(fakeWords) {
		t.Errorf("usage %+v: want 5 prompt tokens, %d completion tokens", whole.Usage, 2*len(fakeWords))
	}
	b.mu.Lock()
	if len(b.made) != 2 || b.follows[0] != nil || b.follows[1] != b.made[0] {
		t.Errorf("generations %d, follows %v: the second choice must follow the first's stream %p", len(b.made), b.follows, b.made[0])
	}
	b.mu.Unlock()

	status, hdr, body := post(t, u, "", map[string]any{"model": "fake-model", "prompt": "hi", "max_tokens": 3, "stream": true})
	if status != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %q %s", status, hdr.Get("Content-Type"), body)
	}
	var got []string
	done := false
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("%v: %s", err, data)
		}
		for _, c := range chunk.Choices {
			if c.Text != "" {
				got = append(got, c.Text)
			}
		}
	}
	if !done || strings.Join(got, "") != want || len(got) != len(fakeWords) {
		t.Fatalf("stream: done %v, texts %q; want %q in %d events:\n%s", done, got, fakeWords, len(fakeWords), body)
	}
}
