package api

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestOfficialOpenAIClient drives the shared 3-node swarm with the
// official openai npm client, which `make test` installs (pinned in
// testdata/openai-client/package-lock.json).
func TestOfficialOpenAIClient(t *testing.T) {
	dir, _ := filepath.Abs("testdata/openai-client")
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node.js on this machine: the openai client check needs it")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		t.Skipf("the openai npm package is not installed: run make test (it runs npm ci in %s)", dir)
	}
	c := shared.get(t)
	const key = "s3cret-key"
	keyed, err := New(c.nodes[1], WithLogger(testLog()), WithAPIKey(key))
	if err != nil {
		t.Fatal(err)
	}
	defer keyed.Close()
	addr, err := keyed.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, "check.mjs", c.urls[0]+"/v1", "http://"+addr.String()+"/v1", key)
	cmd.Dir = dir
	outb, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("openai client check: %v\n%s", err, stderr)
	}
	var got struct {
		Models          []string
		Completion      string
		Chat            string
		ChatFinish      string
		Streamed        string
		Chunks          int
		UnknownModel    map[string]any
		WrongKey        map[string]any
		RightKeyModels  int
		CompletionUsage map[string]int
	}
	if err := json.Unmarshal(outb, &got); err != nil {
		t.Fatalf("client output %q: %v", outb, err)
	}
	t.Logf("openai client saw: models %v, completion %q, chat %q (%s), streamed in %d chunks, unknown model %v, wrong key %v",
		got.Models, got.Completion, got.Chat, got.ChatFinish, got.Chunks, got.UnknownModel, got.WrongKey)
	if len(got.Models) != 1 || got.Models[0] != c.nodes[0].Model().Name {
		t.Errorf("models %v", got.Models)
	}
	if got.Completion == "" || got.CompletionUsage["completion_tokens"] == 0 {
		t.Errorf("completion %q usage %v", got.Completion, got.CompletionUsage)
	}
	if got.Streamed != got.Chat || got.Chunks < 2 {
		t.Errorf("streamed %q in %d chunks, whole %q", got.Streamed, got.Chunks, got.Chat)
	}
	if got.UnknownModel["status"] != float64(404) || got.UnknownModel["isAPIError"] != true || got.UnknownModel["notFound"] != true {
		t.Errorf("unknown model: %v", got.UnknownModel)
	}
	if got.WrongKey["status"] != float64(401) || got.WrongKey["auth"] != true || got.RightKeyModels != 1 {
		t.Errorf("wrong key: %v, right key listed %d models", got.WrongKey, got.RightKeyModels)
	}
}
