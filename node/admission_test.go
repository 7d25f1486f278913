package node

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/swarm"
)

// staticIDs makes k data dirs with identities, so that a static map can
// name the nodes before they start.
func staticIDs(t testing.TB, k int) ([]string, []peer.ID) {
	var dirs []string
	var ids []peer.ID
	for range k {
		dir := t.TempDir()
		key, err := swarm.LoadOrCreateIdentity(dir)
		if err != nil {
			t.Fatal(err)
		}
		id, err := peer.IDFromPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		dirs, ids = append(dirs, dir), append(ids, id)
	}
	return dirs, ids
}

// weightBytes is what layers [lo, hi) of the test model take.
func weightBytes(t testing.TB, lo, hi int) int64 {
	var w int64
	for l := lo; l < hi; l++ {
		st, err := engine.Open(testModel(t), engine.WithRange(l, l+1), engine.WithThreads(1))
		if err != nil {
			t.Fatal(err)
		}
		w += st.Info().WeightBytes
		st.Close()
	}
	return w
}

// TestAdmission: on a static map whose second hop has KV memory for one
// session and a queue of one, four concurrent generations all complete
// exactly: one runs, the others wait in the entry's queue (its reports
// say the hop is full) or, let through on a report not yet counting the
// running one, at the hop, refused as busy and back. A session that can never fit is refused at once
// with ErrNoCapacity.
func TestAdmission(t *testing.T) {
	dirs, ids := staticIDs(t, 2)
	m, err := layers.NewLayerMap(8, 1, layers.Stage{Node: ids[0].String(), Range: layers.Range{Start: 0, End: 4}},
		layers.Stage{Node: ids[1].String(), Range: layers.Range{Start: 4, End: 8}})
	if err != nil {
		t.Fatal(err)
	}
	const prompt, maxTokens = "Once upon a time", 40
	tok, err := engine.LoadTokenizer(testModel(t))
	if err != nil {
		t.Fatal(err)
	}
	perToken := int64(4 * 2 * 32 * 4) // 4 layers × K and V × 32 KV dims × float32
	session := int64(len(tok.Encode(prompt, true, false))+maxTokens) * perToken
	mem := int64(float64(weightBytes(t, 4, 8)+session*3/2)/(1-DefaultMemoryReserve)) + 1

	c := newTestCluster(t, WithStaticMap(m))
	a := c.add(WithDataDir(dirs[0]))
	b := c.add(WithDataDir(dirs[1]), WithMemory(mem), WithQueue(1, 10*time.Second))
	c.waitServing(10*time.Second, a.ID(), b.ID())
	// The budget is what the memory cap leaves once the layers are in
	// (they are: b routes).
	st, err := b.svc.sched.sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if budget := st.KVBudget; budget < session || budget >= 2*session {
		t.Fatalf("KV budget %d bytes for sessions of %d", budget, session)
	}

	want := reference(t, prompt, maxTokens, greedy)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := a.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens})
			if err == nil && !slices.Equal(res.Tokens, want) {
				err = errMismatch
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("generation %d: %v", i, err)
		}
	}
	mb, ma := b.Metrics(), a.Metrics()
	t.Logf("second hop: %d sessions waited for memory, %d steps refused (busy), %d steps, %d batches; entry: %d requests queued",
		mb.Waited, mb.Rejected, mb.Steps, mb.Batches, ma.EntryQueued)
	// The entry's queue holds back what the hop's reports say does not
	// fit; what it lets through on a stale report waits at the hop.
	if mb.Waited+mb.Rejected+ma.EntryQueued == 0 {
		t.Fatal("no request waited, at the entry or at the hop")
	}

	// Too big for the only holder of layers [4, 8): refused, not retried.
	start := time.Now()
	_, err = a.Complete(ctx, Request{Prompt: prompt, MaxTokens: 1000})
	if !errors.Is(err, ErrNoCapacity) || time.Since(start) > 2*time.Second {
		t.Fatalf("oversized session: %v after %v", err, time.Since(start))
	}
	if got := b.Metrics().Sessions; got != 0 {
		t.Fatalf("%d sessions left on the second hop", got)
	}
}

// TestStaticF16Wire: hidden states can travel as float16; the swarm then
// generates (the tokens may differ from a float32 run's).
func TestStaticF16Wire(t *testing.T) {
	dirs, ids := staticIDs(t, 2)
	m, err := layers.NewLayerMap(8, 1, layers.Stage{Node: ids[0].String(), Range: layers.Range{Start: 0, End: 5}},
		layers.Stage{Node: ids[1].String(), Range: layers.Range{Start: 5, End: 8}})
	if err != nil {
		t.Fatal(err)
	}
	c := newTestCluster(t, WithStaticMap(m), WithWireF16(true))
	a := c.add(WithDataDir(dirs[0]))
	b := c.add(WithDataDir(dirs[1]))
	c.waitServing(10*time.Second, a.ID(), b.ID())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := a.Complete(ctx, Request{Prompt: "Once upon a time", MaxTokens: 16})
	if err != nil || len(res.Tokens) == 0 || res.Usage.TotalTokens != res.Usage.PromptTokens+len(res.Tokens) {
		t.Fatalf("%v: %+v", err, res)
	}
	if st := b.Metrics(); st.Steps < uint64(len(res.Tokens)) {
		t.Fatalf("second hop ran %d steps for %d tokens", st.Steps, len(res.Tokens))
	}
}

// TestEntryQueueOnSwarm: on a static map whose second hop has KV memory
// for one session, a second request waits in the entry's queue while the
// first holds the hop (its caller does not read it, so it pauses with its
// session open), the entry's heartbeats carry the queue (the load table,
// seen in the hop's peer table), and once the first ends the second runs
// to the single-process tokens.
func TestEntryQueueOnSwarm(t *testing.T) {
	dirs, ids := staticIDs(t, 2)
	m, err := layers.NewLayerMap(8, 1, layers.Stage{Node: ids[0].String(), Range: layers.Range{Start: 0, End: 4}},
		layers.Stage{Node: ids[1].String(), Range: layers.Range{Start: 4, End: 8}})
	if err != nil {
		t.Fatal(err)
	}
	const prompt, maxTokens = "Once upon a time", 40
	tok, err := engine.LoadTokenizer(testModel(t))
	if err != nil {
		t.Fatal(err)
	}
	perToken := int64(4 * 2 * 32 * 4) // 4 layers × K and V × 32 KV dims × float32
	session := int64(len(tok.Encode(prompt, true, false))+maxTokens) * perToken
	mem := int64(float64(weightBytes(t, 4, 8)+session*3/2)/(1-DefaultMemoryReserve)) + 1

	c := newTestCluster(t, WithStaticMap(m))
	a := c.add(WithDataDir(dirs[0]))
	b := c.add(WithDataDir(dirs[1]), WithMemory(mem))
	c.waitServing(10*time.Second, a.ID(), b.ID())
	// Until the entry hears the hop's KV figure it admits on the path
	// alone (a missing figure means keep serving).
	waitFor(t, 10*time.Second, "the entry hears the hop's free KV", func() bool { return a.paths.kv(b.ID().String()).free >= 0 })
	want := reference(t, prompt, maxTokens, greedy)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	first, err := a.Generate(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: greedy})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the first session open on the hop", func() bool { return b.Metrics().Sessions == 1 })
	second := make(chan error, 1)
	go func() {
		res, err := a.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: greedy})
		if err == nil && !slices.Equal(res.Tokens, want) {
			err = errMismatch
		}
		second <- err
	}()
	waitFor(t, 10*time.Second, "the second request queued at the entry", func() bool { return a.Metrics().EntryQueue == 1 })
	waitFor(t, 10*time.Second, "the hop hears of the entry's queue", func() bool {
		p, ok := b.host.Peers().Get(a.ID())
		return ok && p.Heartbeat != nil && p.Heartbeat.EntryQueue == 1 && p.Heartbeat.EntryWait > 0
	})
	if b.Metrics().Sessions != 1 {
		t.Fatalf("%d sessions on the hop while one waits at the entry", b.Metrics().Sessions)
	}
	var got []int32
	for {
		d, err := first.Recv()
		if err != nil {
			break
		}
		got = append(got, d.Tokens...)
	}
	if _, err := first.Result(); err != nil || !slices.Equal(got, want) {
		t.Fatalf("first: %v, tokens equal %v", err, slices.Equal(got, want))
	}
	if err := <-second; err != nil {
		t.Fatalf("second: %v", err)
	}
	ma := a.Metrics()
	if ma.EntryQueued != 1 || ma.EntryRefused != 0 || ma.QueueWait.Count != 2 || ma.EntryQueue != 0 {
		t.Fatalf("entry metrics: %d queued, %d refused, %d waits, %d queued now", ma.EntryQueued, ma.EntryRefused, ma.QueueWait.Count, ma.EntryQueue)
	}
	waitFor(t, 10*time.Second, "the load table empties", func() bool {
		p, ok := b.host.Peers().Get(a.ID())
		return ok && p.Heartbeat != nil && p.Heartbeat.EntryQueue == 0
	})
}
