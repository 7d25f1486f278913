package node

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/layers"
)

// BenchmarkSignedFrames: the throughput cost of signed hops. One swarm on
// loopback (static map: layers [0,3), [3,6) and [6,8) on three nodes, so
// every token crosses two signed frames; the entry a fourth node with no
// layers), four concurrent greedy generations of 32 tokens per round, no
// spot checks; each iteration runs one round with frames signed and
// checked and one without, in alternating order, on the same swarm.
// Reported: tokens per second each way and the ratio signed/unsigned.
func BenchmarkSignedFrames(b *testing.B) {
	dirs, ids := staticIDs(b, 4)
	var stages []layers.Stage
	for i, r := range []layers.Range{{Start: 0, End: 3}, {Start: 3, End: 6}, {Start: 6, End: 8}} {
		stages = append(stages, layers.Stage{Node: ids[i+1].String(), Range: r})
	}
	m, err := layers.NewLayerMap(8, 1, stages...)
	if err != nil {
		b.Fatal(err)
	}
	c := newTestCluster(b, WithStaticMap(m), WithLogger(nil), WithVerifyRate(0))
	var nodes []*Node
	for i := range ids {
		nodes = append(nodes, c.add(WithDataDir(dirs[i])))
	}
	c.waitServing(20*time.Second, ids[1:]...)
	entry := nodes[0]
	ctx := context.Background()
	const streams, perGen = 4, 32
	for range 3 * streams {
		if _, err := entry.Complete(ctx, Request{Prompt: benchPrompt, MaxTokens: perGen}); err != nil {
			b.Fatal(err)
		}
	}
	bad0 := entry.Metrics().BadFrames
	round := func(signed bool) int {
		for _, n := range nodes {
			n.svc.sched.signFrames.Store(signed) // no generation runs between rounds
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		n := 0
		for range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := entry.Complete(ctx, Request{Prompt: benchPrompt, MaxTokens: perGen})
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				n += len(res.Tokens)
				mu.Unlock()
			}()
		}
		wg.Wait()
		return n
	}
	var tokens [2]int
	var spent [2]time.Duration
	i := 0
	for b.Loop() {
		for k := range 2 {
			j := (i + k) % 2 // j 0: unsigned, 1: signed
			start := time.Now()
			tokens[j] += round(j == 1)
			spent[j] += time.Since(start)
		}
		i++
	}
	for _, n := range nodes {
		if bad := n.Metrics().BadFrames; n == entry && bad != bad0 || bad > 0 && n != entry {
			b.Fatalf("%s refused %d frames on an honest swarm", shortID(n.ID()), bad)
		}
	}
	off := float64(tokens[0]) / spent[0].Seconds()
	on := float64(tokens[1]) / spent[1].Seconds()
	b.ReportMetric(off, "tok/s@unsigned")
	b.ReportMetric(on, "tok/s@signed")
	b.ReportMetric(on/off, "x_unsigned")
}

// BenchmarkFrameSignature: what one frame costs its two hops: the sender
// signs its receipt, the receiver hashes the rows into its chain and
// verifies the signature (Ed25519), for one row of 64 values (the test
// model's width) and of 4096.
func BenchmarkFrameSignature(b *testing.B) {
	for _, cols := range []int{64, 4096} {
		b.Run(fmt.Sprintf("cols=%d", cols), func(b *testing.B) {
			key, _, err := crypto.GenerateEd25519Key(rand.Reader)
			if err != nil {
				b.Fatal(err)
			}
			id, err := peer.IDFromPrivateKey(key)
			if err != nil {
				b.Fatal(err)
			}
			rows := rowBytes(make([]float32, cols))
			r := consensus.Receipt{Signer: id, Model: 1, From: 0, To: 4, Positions: 1}
			for b.Loop() {
				h := sha256.New()
				h.Write(rows)
				h.Sum(r.OutChain[:0])
				r.OutLast = sha256.Sum256(rows)
				if err := r.Sign(key); err != nil {
					b.Fatal(err)
				}
				if err := r.Verify(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
