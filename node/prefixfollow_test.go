package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/swarm"
)

// TestPrefixFollowUps (issue 32): the shape on three real nodes,
// a later hop held twice and the entry on the first, so that two equal
// paths share the first hop. Twenty rounds: a cold request fills the
// caches, and the follow-up, streamed and read to its end the moment the
// first returns, resumes on every hop of the same path with no replay.
// Even rounds send the same prompt again, odd ones a prompt sharing all
// but its last blocks and then going its own way (the second
// case). Counted over all rounds, then required 20 of 20: a count, not
// a first failure, so that a regression says how often.
func TestPrefixFollowUps(t *testing.T) {
	dirs, ids := staticIDs(t, 3)
	m, err := layers.NewLayerMap(8, 1,
		layers.Stage{Node: ids[0].String(), Range: layers.Range{Start: 0, End: 4}},
		layers.Stage{Node: ids[1].String(), Range: layers.Range{Start: 4, End: 8}},
		layers.Stage{Node: ids[2].String(), Range: layers.Range{Start: 4, End: 8}})
	if err != nil {
		t.Fatal(err)
	}
	// A loaded machine must not turn a slow step or a late heartbeat into
	// a replay: the check is of the prefix cache, not failure handling.
	c := newTestCluster(t, WithStaticMap(m), WithStepTimeout(30*time.Second),
		WithSwarmOptions(swarm.WithLiveness(10*time.Second, 30*time.Second, 30*time.Second)))
	for i := range 3 {
		c.add(WithDataDir(dirs[i]))
	}
	c.waitServing(30*time.Second, ids...)
	nodes := c.all()
	entry := nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	vocab := entry.model.info.Vocab
	rng := rand.New(rand.NewPCG(32, 20))
	const rounds, answer = 20, 4
	hits := 0
	var misses []string
	for round := range rounds {
		prompt := randomTokens(rng, 16*prefixBlock+5, vocab)
		a, err := entry.Complete(ctx, Request{Tokens: prompt, MaxTokens: answer})
		if err != nil {
			t.Fatal(err)
		}
		hits0, tok0 := prefixCounters(t, ctx, nodes)
		next := prompt
		if round%2 == 1 {
			next = slices.Concat(prompt[:14*prefixBlock], randomTokens(rng, 2*prefixBlock+9, vocab))
		}
		fed := slices.Concat(prompt, a.Tokens[:len(a.Tokens)-1])
		resumed := sharedBlocks(fed, next, len(next)-1)
		s, err := entry.Generate(ctx, Request{Tokens: next, MaxTokens: answer})
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := s.Recv(); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
		}
		b, err := s.Result()
		if err != nil {
			t.Fatal(err)
		}
		hits1, tok1 := prefixCounters(t, ctx, nodes)
		ok := len(a.Paths) == 1 && len(b.Paths) == 1 && a.Paths[0] == b.Paths[0]
		for i, n := range nodes {
			want, wantTok := uint64(0), uint64(0)
			if len(b.Paths) > 0 && strings.Contains(b.Paths[0], n.ID().String()) {
				want, wantTok = 1, uint64(resumed)
			}
			if hits1[i]-hits0[i] != want || tok1[i]-tok0[i] != wantTok {
				ok = false
			}
		}
		if ok {
			hits++
		} else {
			misses = append(misses, fmt.Sprintf("round %d: the first went %v, the follow-up %v", round, a.Paths, b.Paths))
		}
	}
	t.Logf("follow-ups that resumed on every hop of the same path: %d of %d", hits, rounds)
	if hits != rounds {
		t.Fatalf("%d of %d follow-ups resumed:\n%s", hits, rounds, strings.Join(misses, "\n"))
	}
}
