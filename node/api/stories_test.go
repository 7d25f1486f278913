package api

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/node"
)

// TestStories260KSwarm: three nodes serve the shipped trained model
// (testdata/models/stories260K.gguf: 5 layers, at most 3 per node, so
// every path has two hops or more). /v1/models says it has no chat
// template; a greedy plain completion of "Once upon a time" through the
// third node's API, whole and streamed, is the start of llama2.c's
// published sample, an oracle that is not Strata's own output; and a
// chat request is still served, in the engine's built-in format.
func TestStories260KSwarm(t *testing.T) {
	const (
		prompt = "Once upon a time"
		lily   = ", there was a little girl named Lily. She loved to play outside in the park."
	)
	sample := publishedStories(t, "../../testdata/models/stories260K.greedy.txt", prompt)
	c := startCluster(t, 3, node.WithModelFile("../../testdata/models/stories260K.gguf"), node.WithMaxLayers(3))
	defer c.close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := NewClient(c.urls[2])
	if err != nil {
		t.Fatal(err)
	}
	models, err := cl.ModelEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(models) != 1 || models[0].ChatTemplate == nil || *models[0].ChatTemplate || !models[0].PlainCompletion() {
		t.Fatalf("models %+v: want one, without a chat template, asked by plain completion", models)
	}
	temp := 0.0
	req := CompletionRequest{Model: models[0].ID, Prompt: prompt, MaxTokens: 80, Temperature: &temp}
	whole, err := cl.Complete(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(whole.Text, lily) || !strings.HasPrefix(sample, whole.Text) {
		t.Fatalf("greedy continuation %q\nis not the start of llama2.c's published sample %q", whole.Text, sample)
	}
	if whole.CompletionTokens != 80 || len(whole.Paths) == 0 {
		t.Fatalf("reply %+v: want 80 tokens and a path", whole)
	}
	for _, p := range whole.Paths {
		if strings.Count(p, "→") < 1 {
			t.Fatalf("path %s has fewer than two hops", p)
		}
	}
	var pieces int
	streamed, err := cl.CompleteStream(ctx, req, func(string) error { pieces++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if streamed.Text != whole.Text || pieces < 2 {
		t.Fatalf("streamed in %d pieces %q, whole %q", pieces, streamed.Text, whole.Text)
	}
	chat, err := cl.Chat(ctx, ChatRequest{Model: models[0].ID, Messages: []engine.Message{{Role: "user", Content: prompt}},
		MaxTokens: 16, Temperature: &temp})
	if err != nil || chat.CompletionTokens == 0 {
		t.Fatalf("a chat request to a model without a chat template: %+v, %v", chat, err)
	}
	t.Logf("via %v: %q; a chat request in the built-in format gave %q", whole.Paths, whole.Text, chat.Text)
}

// publishedStories is llama2.c's published greedy sample of stories260K
// after prompt, without the file's final newline.
func publishedStories(t *testing.T, file, prompt string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := strings.CutPrefix(strings.TrimSuffix(string(b), "\n"), prompt)
	if !ok {
		t.Fatalf("%s does not begin with %q", file, prompt)
	}
	return s
}
