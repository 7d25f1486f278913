package node

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
)

// The scheduler's unit tests drive its loop body directly (handle,
// admitWaiting, execute, expire) on simulated stages that do not sleep,
// with a fake outbox: no libp2p, no goroutines, no clock.

// sent is what the fake outbox was asked to send.
type sent struct {
	kind string // forward, token or fail
	to   peer.ID
	m    Message
}

type fakeOutbox struct{ sent []sent }

func (f *fakeOutbox) forward(to peer.ID, s *Step)  { f.sent = append(f.sent, sent{"forward", to, s}) }
func (f *fakeOutbox) token(to peer.ID, t *Token)   { f.sent = append(f.sent, sent{"token", to, t}) }
func (f *fakeOutbox) fail(to peer.ID, e *ErrorMsg) { f.sent = append(f.sent, sent{"fail", to, e}) }
func (f *fakeOutbox) receipt(to peer.ID, r *ReceiptMsg) {
	f.sent = append(f.sent, sent{"receipt", to, r})
}

func (f *fakeOutbox) take(t *testing.T) sent {
	t.Helper()
	if len(f.sent) != 1 {
		t.Fatalf("outbox holds %d messages, want 1: %+v", len(f.sent), f.sent)
	}
	s := f.sent[0]
	f.sent = nil
	return s
}

const (
	schedSelf  = peer.ID("self")
	schedEntry = peer.ID("entry")
	schedNext  = peer.ID("next")
)

type schedRig struct {
	s    *scheduler
	out  *fakeOutbox
	info ModelInfo
	t0   time.Time
}

// newSchedRig holds layers [lo, hi) of a simulated llama-3-8b.
func newSchedRig(t *testing.T, lo, hi int, memBudget int64) *schedRig {
	t.Helper()
	spec, err := layers.Model("llama-3-8b")
	if err != nil {
		t.Fatal(err)
	}
	hw, err := layers.Device("l40s")
	if err != nil {
		t.Fatal(err)
	}
	noSleep := engine.WithSimSleep(func(context.Context, time.Duration) error { return nil })
	stages := map[int]engine.Stage{}
	var in engine.Info
	for l := lo; l < hi; l++ {
		st, err := engine.NewSimStage(spec, hw, engine.WithRange(l, l+1), noSleep)
		if err != nil {
			t.Fatal(err)
		}
		stages[l], in = st, st.Info()
	}
	info := ModelInfo{Name: in.Name, Fingerprint: in.Fingerprint, Layers: spec.Layers, Hidden: spec.Hidden, Vocab: spec.Vocab, Context: 4096, Simulated: true}
	out := &fakeOutbox{}
	s := newScheduler(schedConfig{self: schedSelf, model: info, hash: ModelHash(info.Fingerprint), memBudget: memBudget,
		maxBatch: 8, maxQueue: 1, idleTimeout: time.Minute, queueTimeout: 10 * time.Second, log: zap.NewNop()}, out)
	r := &schedRig{s: s, out: out, info: info, t0: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r.deliver(loadIn{spans: layerSpans(stages), done: make(chan struct{})})
	t.Cleanup(s.shutdown)
	return r
}

// deliver hands messages to the loop and runs one batch, as run does.
func (r *schedRig) deliver(ms ...inboxMsg) {
	var ready []*stepIn
	for _, m := range ms {
		r.s.handle(m, &ready)
	}
	r.s.admitWaiting(&ready)
	if len(ready) > 0 {
		r.s.execute(context.Background(), ready)
	}
	r.s.publish()
}

func (r *schedRig) open(sid SessionID, hops []Hop, tokens []int32, capacity int) *stepIn {
	return &stepIn{from: schedEntry, at: r.t0, m: &Step{Session: sid, Entry: schedEntry, Hops: hops, Tokens: tokens,
		Open: &Open{MaxTokens: capacity, Model: r.s.cfg.hash, Sampling: engine.SamplingParams{TopK: 1}}}}
}

func (r *schedRig) next(sid SessionID, hops []Hop, pos int, token int32) *stepIn {
	return &stepIn{from: schedEntry, at: r.t0, m: &Step{Session: sid, Entry: schedEntry, Hops: hops, Pos: pos, Tokens: []int32{token}}}
}

func TestSchedulerLastHopSamples(t *testing.T) {
	r := newSchedRig(t, 0, 32, 40<<30)
	hops := []Hop{{Peer: schedSelf, From: 0, To: 32}}
	r.deliver(r.open(SessionID{1}, hops, []int32{1, 2, 3}, 64))
	got := r.out.take(t)
	tok, ok := got.m.(*Token)
	if got.kind != "token" || got.to != schedEntry || !ok || tok.Pos != 3 {
		t.Fatalf("sent %s %+v to %s, want a token at position 3 to the entry", got.kind, got.m, got.to)
	}
	// The session goes on at the position it holds; the same inputs give
	// the same token (the simulated stages are deterministic).
	r.deliver(r.next(SessionID{1}, hops, 3, tok.Token))
	if got := r.out.take(t); got.kind != "token" || got.m.(*Token).Pos != 4 {
		t.Fatalf("second step: %s %+v", got.kind, got.m)
	}
	if st := r.s.status.Load(); st.Sessions != 1 || st.Steps != 2 {
		t.Errorf("status: %d sessions, %d steps", st.Sessions, st.Steps)
	}
}

func TestSchedulerForwardsToNextHop(t *testing.T) {
	r := newSchedRig(t, 0, 16, 40<<30)
	hops := []Hop{{Peer: schedSelf, From: 0, To: 16}, {Peer: schedNext, From: 16, To: 32}}
	r.deliver(r.open(SessionID{2}, hops, []int32{5, 6}, 64))
	got := r.out.take(t)
	fw, ok := got.m.(*Step)
	if got.kind != "forward" || got.to != schedNext || !ok {
		t.Fatalf("sent %s to %s, want a forward to the next hop", got.kind, got.to)
	}
	if len(fw.Hops) != 1 || fw.Hops[0] != hops[1] || fw.Entry != schedEntry || fw.Open == nil {
		t.Errorf("forwarded step: hops %v entry %s open %v", fw.Hops, fw.Entry, fw.Open)
	}
	if fw.Cols != r.info.Hidden || len(fw.Hidden) != 2*r.info.Hidden {
		t.Errorf("hidden states %d values of %d columns, want 2 × %d", len(fw.Hidden), fw.Cols, r.info.Hidden)
	}
}

func TestSchedulerRefusals(t *testing.T) {
	whole := []Hop{{Peer: schedSelf, From: 0, To: 32}}
	for name, tc := range map[string]struct {
		step func(r *schedRig) *stepIn
		want ErrorCode
	}{
		"unknown session": {func(r *schedRig) *stepIn { return r.next(SessionID{9}, whole, 3, 1) }, CodeUnknownSession},
		"wrong model": {func(r *schedRig) *stepIn {
			in := r.open(SessionID{9}, whole, []int32{1}, 8)
			in.m.Open.Model++
			return in
		}, CodeWrongModel},
		"layers not held": {func(r *schedRig) *stepIn {
			return r.open(SessionID{9}, []Hop{{Peer: schedSelf, From: 0, To: 16}, {Peer: schedNext, From: 16, To: 32}}, []int32{1}, 8)
		}, CodeNotServing},
		"open off position 0": {func(r *schedRig) *stepIn {
			in := r.open(SessionID{9}, whole, []int32{1}, 8)
			in.m.Pos = 2
			return in
		}, CodeBadFrame},
		"beyond capacity": {func(r *schedRig) *stepIn { return r.open(SessionID{9}, whole, []int32{1, 2, 3}, 2) }, CodeBadFrame},
	} {
		t.Run(name, func(t *testing.T) {
			r := newSchedRig(t, 16, 32, 40<<30) // holds [16, 32) only
			r.deliver(tc.step(r))
			got := r.out.take(t)
			e, ok := got.m.(*ErrorMsg)
			if got.kind != "fail" || got.to != schedEntry || !ok || e.Code != tc.want {
				t.Fatalf("sent %s %+v to %s, want %s to the entry", got.kind, got.m, got.to, tc.want)
			}
		})
	}
}

// TestSchedulerQueuesForMemory: a session that does not fit waits in the
// admission queue, is admitted when another closes, and a queued one
// past the queue timeout is refused as busy.
func TestSchedulerQueuesForMemory(t *testing.T) {
	r := newSchedRig(t, 0, 32, 0)
	hops := []Hop{{Peer: schedSelf, From: 0, To: 32}}
	per, _ := r.s.stages.need(hops[0], 1)
	// Room for the weights and one session of 1024 positions.
	r.s.cfg.memBudget = r.s.stages.weightBytes() + per*1024 + per/2
	r.deliver(r.open(SessionID{1}, hops, []int32{1}, 1024))
	if got := r.out.take(t); got.kind != "token" {
		t.Fatalf("first session: %s", got.kind)
	}
	r.deliver(r.open(SessionID{2}, hops, []int32{1}, 1024))
	if len(r.out.sent) != 0 || r.s.status.Load().Queue != 1 {
		t.Fatalf("second session not queued: sent %+v, queue %d", r.out.sent, r.s.status.Load().Queue)
	}
	r.deliver(r.open(SessionID{3}, hops, []int32{1}, 1024))
	if got := r.out.take(t); got.kind != "fail" || got.m.(*ErrorMsg).Code != CodeBusy {
		t.Fatalf("third session with the queue full: %s %+v", got.kind, got.m)
	}
	r.deliver(closeIn{from: schedEntry, sid: SessionID{1}})
	if got := r.out.take(t); got.kind != "token" || got.m.(*Token).Session != (SessionID{2}) {
		t.Fatalf("queued session not admitted on close: %s %+v", got.kind, got.m)
	}
	r.deliver(r.open(SessionID{4}, hops, []int32{1}, 1024))
	r.s.expire(r.t0.Add(r.s.cfg.queueTimeout + time.Second))
	if got := r.out.take(t); got.kind != "fail" || got.m.(*ErrorMsg).Code != CodeBusy {
		t.Fatalf("expired queued session: %s %+v", got.kind, got.m)
	}
}

// TestSchedulerExpiresIdleSessions: a session idle past the idle timeout
// is dropped, and its next step is refused.
func TestSchedulerExpiresIdleSessions(t *testing.T) {
	r := newSchedRig(t, 0, 32, 40<<30)
	hops := []Hop{{Peer: schedSelf, From: 0, To: 32}}
	r.deliver(r.open(SessionID{1}, hops, []int32{1}, 64))
	tok := r.out.take(t).m.(*Token)
	last := r.s.sessions[hopKey{SessionID{1}, 0}].last
	r.s.expire(last.Add(r.s.cfg.idleTimeout))
	if len(r.s.sessions) != 1 {
		t.Fatal("expired at the idle timeout, not past it")
	}
	r.s.expire(last.Add(r.s.cfg.idleTimeout + time.Nanosecond))
	if len(r.s.sessions) != 0 || r.s.adm.Used() != 0 {
		t.Fatalf("%d sessions, %d KV bytes after expiry", len(r.s.sessions), r.s.adm.Used())
	}
	r.deliver(r.next(SessionID{1}, hops, 1, tok.Token))
	if got := r.out.take(t); got.kind != "fail" || got.m.(*ErrorMsg).Code != CodeUnknownSession {
		t.Fatalf("step after expiry: %s %+v", got.kind, got.m)
	}
}

// TestSchedulerLogProbs: the last hop of a session opened with
// log-probabilities sends them with each token, engine.LogProbs of the
// row it sampled from; a session that did not ask gets none (no work).
func TestSchedulerLogProbs(t *testing.T) {
	r := newSchedRig(t, 0, 32, 40<<30)
	hops := []Hop{{Peer: schedSelf, From: 0, To: 32}}
	in := r.open(SessionID{1}, hops, []int32{1, 2, 3}, 64)
	in.m.Open.LogProbs, in.m.Open.TopLogProbs = true, 4
	r.deliver(in)
	tok := r.out.take(t).m.(*Token)
	if tok.LP == nil || len(tok.LP.Top) != 4 || tok.LP.LogProb > 0 || tok.LP.Top[0].Token != tok.Token || tok.LP.Top[0].LogProb != tok.LP.LogProb {
		t.Fatalf("greedy token %d with log-probabilities %+v", tok.Token, tok.LP)
	}
	if _, err := Encode(nil, tok); err != nil {
		t.Fatalf("the frame does not encode: %v", err)
	}
	r.deliver(r.next(SessionID{1}, hops, 3, tok.Token))
	if tok := r.out.take(t).m.(*Token); tok.LP == nil || tok.Pos != 4 {
		t.Fatalf("the next token %+v", tok)
	}
	r.deliver(r.open(SessionID{2}, hops, []int32{1, 2, 3}, 64))
	if tok := r.out.take(t).m.(*Token); tok.LP != nil {
		t.Fatalf("log-probabilities %+v unasked", tok.LP)
	}
}

// layerSpans makes a span of each one-layer stage, as the warmer does.
func layerSpans(stages map[int]engine.Stage) []*span {
	var spans []*span
	for _, st := range stages {
		spans = append(spans, newSpan(st))
	}
	return spans
}
