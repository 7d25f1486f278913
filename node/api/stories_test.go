package api

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

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

// TestDashboardPlainCompletion: the dashboard of a node serving
// stories260K (no chat template) says that its chat box does plain
// completion, and a text sent from the page goes to /v1/completions,
// streamed, and shows with its continuation. (The page sends no
// temperature, so the text is sampled, not the published greedy one.)
func TestDashboardPlainCompletion(t *testing.T) {
	bin := chromiumPath()
	if bin == "" {
		t.Skip("no Chromium found (looked for chromium, chromium-browser, google-chrome; or set STRATA_CHROMIUM)")
	}
	c := startCluster(t, 1, node.WithModelFile("../../testdata/models/stories260K.gguf"), node.WithMaxLayers(5))
	defer c.close()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("no-proxy-server", true), chromedp.UserDataDir(t.TempDir()))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, tcancel := context.WithTimeout(ctx, 90*time.Second)
	defer tcancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(c.urls[0]+"/"), chromedp.WaitVisible(chromedp.ID("chat-mode"))); err != nil {
		t.Fatalf("the page does not show the plain-completion note: %v", err)
	}
	const prompt = "Once upon a time"
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.ID("chat-max"), "24"),
		chromedp.SendKeys(chromedp.ID("chat-input"), prompt),
		chromedp.Click(chromedp.ID("chat-send")),
		chromedp.WaitVisible(chromedp.CSS(`.msg.assistant[data-done="true"]`)),
	); err != nil {
		t.Fatal(err)
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[struct{ Error, Text string }](`(() => { const m = document.querySelector(".msg.assistant");
	  return {Error: m.dataset.error || "", Text: m.firstChild.textContent}; })()`))
	if err != nil {
		t.Fatal(err)
	}
	if got.Error != "" || !strings.HasPrefix(got.Text, prompt) || len(got.Text) <= len(prompt) {
		t.Fatalf("the page's completion: %+v", got)
	}
	status, _, body := get(t, c.urls[0]+"/v1/swarm/activity", "")
	var act activityJSON
	if err := json.Unmarshal(body, &act); status != http.StatusOK || err != nil {
		t.Fatalf("activity: %d %s: %v", status, body, err)
	}
	if len(act.Requests) != 1 || act.Requests[0].Endpoint != "completions" || !act.Requests[0].Stream || act.Requests[0].Status != "ok" {
		t.Fatalf("the page's requests: %s", body)
	}
	t.Logf("page: %q", got.Text)
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
