package cli

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/stratanet/strata/node"
	"github.com/stratanet/strata/node/api"
	"github.com/stratanet/strata/swarm"
)

// TestChatPlainCompletion: strata chat against a node serving the
// shipped stories260K (no chat template) says so and uses plain
// completion, with --message and line by line; its greedy text is
// llama2.c's published sample. --mode chat still sends a chat.
func TestChatPlainCompletion(t *testing.T) {
	const prompt = "Once upon a time"
	b, err := os.ReadFile("../../../testdata/models/stories260K.greedy.txt")
	if err != nil {
		t.Fatal(err)
	}
	sample := strings.TrimSuffix(string(b), "\n")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.New(ctx, node.WithModelFile("../../../testdata/models/stories260K.gguf"), node.WithDataDir(t.TempDir()),
		node.WithThreads(1), node.WithLogger(zap.NewNop()),
		node.WithSwarmOptions(swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"), swarm.WithReachability(swarm.ReachabilityPublic),
			swarm.WithDiscovery(false)))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	srv, err := api.New(api.NodeBackend(n))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	addr, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	chat := func(in string, args ...string) (stdout, stderr string) {
		t.Helper()
		root := NewRoot()
		var out, errOut bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errOut)
		root.SetIn(strings.NewReader(in))
		root.SetArgs(append([]string{"chat", "--api", "http://" + addr.String(), "--wait", "30s", "--temperature", "0"}, args...))
		if err := root.ExecuteContext(ctx); err != nil {
			t.Fatalf("chat %v: %v\n%s%s", args, err, out.String(), errOut.String())
		}
		return out.String(), errOut.String()
	}
	const notice = "has no chat template: using plain completion"

	out, errOut := chat("", "--message", prompt, "--max-tokens", "40")
	text, _, _ := strings.Cut(out, "\npath: ")
	text, ok := strings.CutPrefix(text, "text: ")
	if !strings.Contains(errOut, notice) || !ok || len(text) < len(prompt+", there was a little girl") ||
		!strings.HasPrefix(sample, text) {
		t.Fatalf("--message: stderr %q, stdout %q: want the notice and the start of %q", errOut, out, sample)
	}

	// Line by line: each line continued on its own, no history.
	out, errOut = chat(prompt+"\n/reset\n"+prompt+"\n", "--max-tokens", "24")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if !strings.Contains(errOut, notice) || len(lines) != 3 || lines[0] != lines[2] || !strings.HasPrefix(sample, lines[0]) ||
		len(lines[0]) <= len(prompt) || lines[1] != "(plain completion keeps no history)" {
		t.Fatalf("line by line: stderr %q, stdout %q", errOut, out)
	}

	// --mode chat: a chat completion, in the node's built-in format.
	out, errOut = chat("", "--mode", "chat", "--message", prompt, "--max-tokens", "8")
	if strings.Contains(errOut, notice) || !strings.HasPrefix(out, "answer: ") {
		t.Fatalf("--mode chat: stderr %q, stdout %q", errOut, out)
	}
}
