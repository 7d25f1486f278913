package node

import (
	"context"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/engine"
)

// fourNodes starts four consensus nodes that offer at most four of the
// model's eight layers each, so that every path has at least two hops,
// and waits until the committed map places them all.
func fourNodes(t *testing.T) *testCluster {
	c := newTestCluster(t, WithMaxLayers(4))
	var ids []peer.ID
	for range 4 {
		ids = append(ids, c.add().ID())
	}
	c.waitServing(30*time.Second, ids...)
	m := c.all()[0].Committed()
	t.Logf("committed map epoch %d: %v", m.Epoch, m.Stages)
	return c
}

func TestGenerateMatchesSingleProcess(t *testing.T) {
	c := fourNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const prompt, maxTokens = "Once upon a time", 24
	for _, sp := range []engine.SamplingParams{
		{},
		{Temperature: 0.9, TopP: 0.95, Seed: 9},
		{Temperature: 1.3, TopK: 50, Seed: 12345, RepeatPenalty: 1.2},
	} {
		want := reference(t, prompt, maxTokens, sp)
		for i, n := range c.all() {
			res, err := n.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: sp})
			if err != nil {
				t.Fatalf("node %d, %+v: %v", i, sp, err)
			}
			if !slices.Equal(res.Tokens, want) {
				t.Fatalf("node %d, %+v:\n swarm %v\nsingle %v", i, sp, res.Tokens, want)
			}
			for _, p := range res.Paths {
				if strings.Count(p, "→") < 1 {
					t.Fatalf("path %s has fewer than two hops", p)
				}
			}
			if res.Usage.CompletionTokens != len(want) || res.Usage.PromptTokens == 0 {
				t.Fatalf("usage %+v", res.Usage)
			}
			t.Logf("node %d %+v: %d tokens via %v, %q", i, sp, len(res.Tokens), res.Paths, res.Text)
		}
	}
}

// referenceLogProbs steps the single-process pipeline through prompt
// and then tokens, and gives engine.LogProbs of each token's logits row.
func referenceLogProbs(t testing.TB, prompt string, tokens []int32, k int) []engine.TokenLogProb {
	t.Helper()
	path := testModel(t)
	tok, err := engine.LoadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := engine.OpenPipeline(path, nil, engine.WithThreads(1))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ids := tok.Encode(prompt, true, false)
	s, err := p.NewSession(len(ids) + len(tokens))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []engine.TokenLogProb // the chosen token, then its top k, per token
	in := ids
	for _, id := range tokens {
		logits, err := s.Step(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		lp, top := engine.LogProbs(logits, id, k)
		out = append(out, engine.TokenLogProb{Token: id, LogProb: lp})
		out = append(out, top...)
		in = []int32{id}
	}
	return out
}

// TestGenerateLogProbs: the log-probabilities a swarm returns (computed
// by the last hop of a two-hop path, sent back in token frames) are
// bit for bit engine.LogProbs of the single-process logits, for greedy
// and sampled generations; greedy's token is the top one; a request that
// does not ask gets none.
func TestGenerateLogProbs(t *testing.T) {
	c := fourNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const prompt, maxTokens, k = "Once upon a time", 12, 5
	n := c.all()[0]
	for _, sp := range []engine.SamplingParams{{}, {Temperature: 0.9, TopK: 40, TopP: 0.9, Seed: 5, RepeatPenalty: 1.3}} {
		st, err := n.Generate(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: sp, LogProbs: true, TopLogProbs: k})
		if err != nil {
			t.Fatal(err)
		}
		var streamed []TokenLogProbs
		for {
			d, err := st.Recv()
			if err != nil {
				break
			}
			if len(d.LogProbs) != len(d.Tokens) {
				t.Fatalf("a delta of %d tokens with %d log-probabilities", len(d.Tokens), len(d.LogProbs))
			}
			streamed = append(streamed, d.LogProbs...)
		}
		res, err := st.Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(res.LogProbs) != len(res.Tokens) || !reflect.DeepEqual(streamed, res.LogProbs) {
			t.Fatalf("%d tokens, %d log-probabilities, %d streamed", len(res.Tokens), len(res.LogProbs), len(streamed))
		}
		want := referenceLogProbs(t, prompt, res.Tokens, k)
		for i, lp := range res.LogProbs {
			w := want[i*(k+1) : (i+1)*(k+1)]
			if lp.Token != res.Tokens[i] || math.Float32bits(lp.LogProb) != math.Float32bits(w[0].LogProb) {
				t.Fatalf("%+v token %d: %d %v, single process %v", sp, i, lp.Token, lp.LogProb, w[0].LogProb)
			}
			if len(lp.Top) != k {
				t.Fatalf("%d top tokens", len(lp.Top))
			}
			for j, tl := range lp.Top {
				if tl.Token != w[1+j].Token || math.Float32bits(tl.LogProb) != math.Float32bits(w[1+j].LogProb) {
					t.Fatalf("%+v token %d top %d: %d %v, single process %d %v", sp, i, j, tl.Token, tl.LogProb, w[1+j].Token, w[1+j].LogProb)
				}
				if j > 0 && tl.LogProb > lp.Top[j-1].LogProb {
					t.Fatalf("top not sorted: %+v", lp.Top)
				}
				if len(tl.Text) == 0 && tl.Token != 0 {
					t.Logf("token %d has no text", tl.Token)
				}
			}
			if sp.Temperature == 0 && lp.Top[0].Token != lp.Token {
				t.Fatalf("greedy token %d is not the top one %+v", lp.Token, lp.Top)
			}
			if !slices.ContainsFunc(lp.Top, func(x LogProb) bool { return x.Token == lp.Token }) && sp.Temperature == 0 {
				t.Fatal("greedy's token is not among the top")
			}
		}
		t.Logf("%+v: %d tokens, first %q %v", sp, len(res.Tokens), res.LogProbs[0].Text, res.LogProbs[0].LogProb)
	}
	res, err := n.Complete(ctx, Request{Prompt: prompt, MaxTokens: 3})
	if err != nil || res.LogProbs != nil {
		t.Fatalf("unasked: %v %v", res.LogProbs, err)
	}
	for _, req := range []Request{{Prompt: prompt, LogProbs: true, TopLogProbs: MaxTopLogProbs + 1}, {Prompt: prompt, TopLogProbs: 2}} {
		if _, err := n.Generate(ctx, req); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("%+v: %v", req, err)
		}
	}
}
