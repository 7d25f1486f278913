package api

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stratanet/strata/engine"
)

// TestClientWhole: the client's whole chat equals the stream, and carries
// the path the swarm took; Swarm and Ready read the node's view.
func TestClientWhole(t *testing.T) {
	c := shared.get(t)
	cl, err := NewClient(c.urls[1])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zero := 0.0
	req := ChatRequest{Model: c.nodes[0].Model().Name, MaxTokens: 16, Temperature: &zero,
		Messages: []engine.Message{{Role: "user", Content: "Once upon a time"}}}
	whole, err := cl.Chat(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	streamed, err := cl.ChatStream(ctx, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if whole.Text != streamed.Text || whole.CompletionTokens != streamed.CompletionTokens || whole.CompletionTokens == 0 {
		t.Fatalf("whole %+v, streamed %+v", whole, streamed)
	}
	if len(whole.Paths) != 1 || !strings.Contains(whole.Paths[0], "→") || whole.TTFT <= 0 {
		t.Fatalf("want one multi-hop path and a TTFT, got %+v", whole)
	}
	var view struct {
		Node      string `json:"node"`
		Committed struct {
			Stages []struct {
				Node string `json:"node"`
			} `json:"stages"`
		} `json:"committed"`
	}
	if err := cl.Swarm(ctx, &view); err != nil {
		t.Fatal(err)
	}
	if view.Node != c.nodes[1].ID().String() || len(view.Committed.Stages) != len(c.nodes) {
		t.Fatalf("swarm view %+v", view)
	}
	if ok, err := cl.Ready(ctx); !ok || err != nil {
		t.Fatalf("ready %v, %v", ok, err)
	}
	dead, _ := NewClient("http://127.0.0.1:1")
	if _, err := dead.Ready(ctx); err == nil {
		t.Fatal("an unreachable node reads as an answer")
	}
	// The request's profile travels: the default by name answers the
	// same, an unknown one is the server's unknown_profile.
	req.Profile = c.nodes[1].Swarm().Scheduler.Default
	if named, err := cl.Chat(ctx, req); err != nil || named.Text != whole.Text {
		t.Fatalf("profile %q: %+v, %v; without: %q", req.Profile, named, err, whole.Text)
	}
	req.Profile = "nope"
	var ae *APIError
	if _, err := cl.ChatStream(ctx, req, nil); !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "unknown_profile" {
		t.Fatalf("unknown profile: %v", err)
	}
	t.Logf("%d tokens via %v, TTFT %v: %q", whole.CompletionTokens, whole.Paths, whole.TTFT, whole.Text)
}
