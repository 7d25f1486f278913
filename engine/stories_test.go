package engine

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestStories260KGreedy runs the shipped trained model (testdata/models,
// llama2.c's stories260K) in one process, whole and split into stages,
// and checks its greedy continuation of "Once upon a time" against
// llama2.c's published sample: a trained model's text is an oracle that
// does not come from Strata, which a random-weight model cannot give.
func TestStories260KGreedy(t *testing.T) {
	const (
		path   = "../testdata/models/stories260K.gguf"
		prompt = "Once upon a time"
		lily   = ", there was a little girl named Lily. She loved to play outside in the park."
	)
	sample := publishedStories(t, "../testdata/models/stories260K.greedy.txt", prompt)
	tok, err := LoadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	if tok.HasChatTemplate() {
		t.Fatal("stories260K has no chat template, but the tokenizer says it has one")
	}
	ids := tok.Encode(prompt, true, false)
	for _, stages := range []string{"", "0:2,2:5"} {
		var cuts []int
		if stages != "" {
			if cuts, err = ParseStages(stages); err != nil {
				t.Fatal(err)
			}
		}
		p, err := OpenPipeline(path, cuts, WithThreads(1))
		if err != nil {
			t.Fatal(err)
		}
		sess, err := p.NewSession(len(ids) + 80)
		if err != nil {
			p.Close()
			t.Fatal(err)
		}
		out, err := sess.Generate(context.Background(), ids, 80, SamplingParams{}, tok.IsEnd, nil)
		sess.Close()
		p.Close()
		if err != nil {
			t.Fatal(err)
		}
		got := tok.Decode(out)
		if !strings.HasPrefix(got, lily) || !strings.HasPrefix(sample, got) {
			t.Fatalf("stages %q: greedy continuation %q\nis not the start of llama2.c's published sample %q", stages, got, sample)
		}
		t.Logf("stages %q: %d tokens: %q", stages, len(out), got)
	}
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
