package node

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/swarm"
)

// rogue is a bare swarm host that speaks the activation protocol badly.
type rogue struct {
	h        *swarm.Host
	replies  chan *ErrorMsg
	tokens   chan *Token
	receipts chan *ReceiptMsg
}

func newRogue(t *testing.T) *rogue {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := swarm.New(ctx, swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"), swarm.WithReachability(swarm.ReachabilityPublic),
		swarm.WithDiscovery(false), swarm.WithHeartbeatInterval(testHeartbeat))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	r := &rogue{h: h, replies: make(chan *ErrorMsg, 64), tokens: make(chan *Token, 64), receipts: make(chan *ReceiptMsg, 8)}
	h.Streams().HandleActivations(func(_ peer.ID, frame []byte) error {
		if m, err := Decode(frame); err == nil {
			switch m := m.(type) {
			case *ErrorMsg:
				r.replies <- m
			case *Token:
				select {
				case r.tokens <- m:
				default:
				}
			case *ReceiptMsg:
				select {
				case r.receipts <- m:
				default:
				}
			}
		}
		return nil
	})
	return r
}

func (r *rogue) send(t *testing.T, to peer.ID, frame []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.h.Streams().SendActivation(ctx, to, frame); err != nil {
		t.Fatal(err)
	}
}

// token waits for a token of session sid.
func (r *rogue) token(t *testing.T, sid SessionID, what string) *Token {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case tok := <-r.tokens:
			if tok.Session == sid {
				return tok
			}
		case <-timeout:
			t.Fatalf("%s: no token", what)
			return nil
		}
	}
}

func (r *rogue) expect(t *testing.T, code ErrorCode, what string) {
	t.Helper()
	select {
	case e := <-r.replies:
		if e.Code != code {
			t.Fatalf("%s: reply %s (%s), want %s", what, e.Code, e.Text, code)
		}
		t.Logf("%s: %s: %s", what, e.Code, e.Text)
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no error reply", what)
	}
}

func mustEncode(t *testing.T, m Message) []byte {
	t.Helper()
	b, err := Encode(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMalformedFrames: a peer that sends malformed frames to a hop gets
// error replies, or its stream is dropped, while a generation through
// that hop goes on to exactly the single-process output.
func TestMalformedFrames(t *testing.T) {
	c := newTestCluster(t, WithMaxLayers(4))
	a, b := c.add(), c.add()
	c.waitServing(20*time.Second, a.ID(), b.ID())
	m := a.Committed()
	rb, _ := m.Range(b.ID().String())
	if rb.Start == 0 {
		a, b = b, a
		rb, _ = m.Range(b.ID().String())
	}
	r := newRogue(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.h.Connect(ctx, b.host.AddrInfo()); err != nil {
		t.Fatal(err)
	}

	// A generation through b runs while the rogue sends its frames.
	const prompt, maxTokens = "Once upon a time", 96
	sp := engine.SamplingParams{Temperature: 0.7, Seed: 3}
	want := reference(t, prompt, maxTokens, sp)
	s, err := a.Generate(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: sp})
	if err != nil {
		t.Fatal(err)
	}

	self := r.h.ID()
	hops := []Hop{{b.ID(), rb.Start, rb.End}}
	hid := func(rows, cols int) []float32 { return make([]float32, rows*cols) }
	open := &Open{MaxTokens: 16, Model: ModelHash(a.Model().Fingerprint)}
	dim := a.Model().Hidden

	r.send(t, b.ID(), mustEncode(t, &Step{Session: newSessionID(), Open: open, Entry: self, Hops: hops, Tokens: []int32{1, 2},
		Hidden: hid(2, dim-1), Cols: dim - 1}))
	r.expect(t, CodeBadFrame, "wrong shape")
	r.send(t, b.ID(), mustEncode(t, &Step{Session: newSessionID(), Entry: self, Hops: hops, Pos: 5, Tokens: []int32{1},
		Hidden: hid(1, dim), Cols: dim}))
	r.expect(t, CodeUnknownSession, "unknown session")
	r.send(t, b.ID(), mustEncode(t, &Step{Session: newSessionID(), Open: open, Entry: self, Hops: hops, Tokens: []int32{100000},
		Hidden: hid(1, dim), Cols: dim}))
	r.expect(t, CodeBadFrame, "token outside the vocabulary")
	r.send(t, b.ID(), mustEncode(t, &Step{Session: newSessionID(), Open: &Open{MaxTokens: 16, Model: 42}, Entry: self, Hops: hops,
		Tokens: []int32{1}, Hidden: hid(1, dim), Cols: dim}))
	r.expect(t, CodeWrongModel, "another model")
	r.send(t, b.ID(), mustEncode(t, &Step{Session: newSessionID(), Open: open, Entry: self, Hops: []Hop{{b.ID(), rb.Start, rb.End - 1}},
		Tokens: []int32{1}, Hidden: hid(1, dim), Cols: dim}))
	r.expect(t, CodeBadFrame, "path that stops short")
	if rb.Start > 0 {
		r.send(t, b.ID(), mustEncode(t, &Step{Session: newSessionID(), Open: open, Entry: self, Hops: []Hop{{b.ID(), 0, rb.End}},
			Tokens: []int32{1}}))
		r.expect(t, CodeNotServing, "layers not held")
	}
	// A valid session, then a step at the wrong position.
	sid := newSessionID()
	fs := newFrameSigner(r.h, open.Model, 0) // signed hops: an unsigned frame is refused
	r.send(t, b.ID(), mustEncode(t, fs.sign(t, &Step{Session: sid, Open: open, Entry: self, Hops: hops, Tokens: []int32{1}, Hidden: hid(1, dim), Cols: dim})))
	r.token(t, sid, "the valid session's first token") // b is the last hop
	r.send(t, b.ID(), mustEncode(t, &Step{Session: sid, Entry: self, Hops: hops, Pos: 7, Tokens: []int32{1}, Hidden: hid(1, dim), Cols: dim}))
	r.expect(t, CodeBadFrame, "wrong position")

	// Undecodable frames: an error reply, then the stream is dropped.
	good := mustEncode(t, &Step{Session: newSessionID(), Open: open, Entry: self, Hops: hops, Tokens: []int32{1}, Hidden: hid(1, dim), Cols: dim})
	badDType := slices.Clone(good)
	badDType[len(badDType)-4*dim-5] = 7
	r.send(t, b.ID(), badDType)
	r.expect(t, CodeBadFrame, "unknown dtype")
	r.send(t, b.ID(), good[:len(good)-10])
	r.expect(t, CodeBadFrame, "truncated")
	// A q8 frame whose first block has a negative scale.
	forged := mustEncode(t, &Step{Session: newSessionID(), Open: open, Entry: self, Hops: hops, Tokens: []int32{1}, Hidden: hid(1, dim),
		Cols: dim, DType: DTypeQ8})
	binary.LittleEndian.PutUint32(forged[len(forged)-int(q8RowBytes(dim)):], math.Float32bits(-1))
	r.send(t, b.ID(), forged)
	r.expect(t, CodeBadFrame, "forged q8 scale")
	if n := b.counters.badFramesFrom(self); n < 3 {
		t.Fatalf("%d undecodable frames counted", n)
	}

	// Oversized: the length prefix alone is refused before any allocation.
	st, err := r.h.Streams().Open(ctx, b.ID(), swarm.ProtocolAct)
	if err != nil {
		t.Fatal(err)
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 1<<30)
	_, _ = st.Write(hdr[:])
	_ = st.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := st.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("oversized frame: stream not dropped (%v)", err)
	}
	waitFor(t, 5*time.Second, "the oversized frame counted", func() bool { return b.host.Links().Rejections(self).Frame > 0 })

	// The generation through b was never touched.
	got, err := recvAll(s)
	if err != nil {
		t.Fatal(err)
	}
	res, _ := s.Result()
	if !slices.Equal(got, want) || res.Replays != 0 {
		t.Fatalf("generation beside the rogue: %d replays\n swarm %v\nsingle %v", res.Replays, got, want)
	}
	// The rogue's good session is still there, and b still serves.
	if got := b.Metrics().Sessions; got < 1 {
		t.Fatalf("b holds %d sessions", got)
	}
	if _, err := a.Complete(ctx, Request{Prompt: prompt, MaxTokens: 8}); err != nil {
		t.Fatal(err)
	}
}

// TestSessionCloseAndExpiry: a session is freed at once by its entry's
// close (and not by anyone else's), and expires on its own when nobody
// steps or closes it.
func TestSessionCloseAndExpiry(t *testing.T) {
	dirs, ids := staticIDs(t, 1)
	m, err := layers.NewLayerMap(8, 1, layers.Stage{Node: ids[0].String(), Range: layers.Range{Start: 0, End: 8}})
	if err != nil {
		t.Fatal(err)
	}
	c := newTestCluster(t, WithStaticMap(m))
	clock := clockwork.NewFakeClockAt(time.Now())
	const idle = 400 * time.Millisecond
	b := c.add(WithDataDir(dirs[0]), WithIdleTimeout(idle), WithClock(clock))
	c.waitServing(10*time.Second, b.ID())
	r, other := newRogue(t), newRogue(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, x := range []*rogue{r, other} {
		if err := x.h.Connect(ctx, b.host.AddrInfo()); err != nil {
			t.Fatal(err)
		}
	}
	open := func(sid SessionID) {
		r.send(t, b.ID(), mustEncode(t, &Step{Session: sid, Open: &Open{MaxTokens: 8, Model: ModelHash(b.Model().Fingerprint)},
			Entry: r.h.ID(), Hops: []Hop{{b.ID(), 0, 8}}, Tokens: []int32{1, 2}}))
	}
	sessions := func() int { return b.Metrics().Sessions }
	s1, s2 := newSessionID(), newSessionID()
	open(s1)
	open(s2)
	waitFor(t, 2*time.Second, "two sessions open", func() bool { return sessions() == 2 })
	other.send(t, b.ID(), mustEncode(t, &Close{Session: s1}))
	// A step of other's that b refuses: once other hears the refusal,
	// b has handled the close sent before it on the same stream.
	other.send(t, b.ID(), mustEncode(t, &Step{Session: newSessionID(), Entry: other.h.ID(), Hops: []Hop{{b.ID(), 0, 8}}, Pos: 2, Tokens: []int32{1}}))
	other.expect(t, CodeUnknownSession, "a step after the close")
	if st, err := b.svc.sched.sync(ctx); err != nil || st.Sessions != 2 {
		t.Fatalf("a close from a peer that is not the entry freed a session (%v)", err)
	}
	r.send(t, b.ID(), mustEncode(t, &Close{Session: s1}))
	waitFor(t, 5*time.Second, "the entry's close", func() bool { return sessions() == 1 })
	// The idle timeout passes on b's clock: the other session expires.
	clock.Advance(idle + idle/4)
	waitFor(t, 5*time.Second, "idle expiry", func() bool { return sessions() == 0 })
}

// TestReleaseAfterSessions: layers a commit no longer gives the node stay
// loaded while a session uses them and go once it closes; new sessions
// on them are refused meanwhile.
func TestReleaseAfterSessions(t *testing.T) {
	dirs, ids := staticIDs(t, 1)
	m, err := layers.NewLayerMap(8, 1, layers.Stage{Node: ids[0].String(), Range: layers.Range{Start: 0, End: 8}})
	if err != nil {
		t.Fatal(err)
	}
	c := newTestCluster(t, WithStaticMap(m))
	// The rogue sends unsigned hidden states as if from an upstream hop:
	// this test is about released layers, not signatures.
	b := c.add(WithDataDir(dirs[0]), WithSignedFrames(false))
	c.waitServing(10*time.Second, b.ID())
	r := newRogue(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.h.Connect(ctx, b.host.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	open := &Open{MaxTokens: 8, Model: ModelHash(b.Model().Fingerprint)}
	dim := b.Model().Hidden
	sid := newSessionID()
	r.send(t, b.ID(), mustEncode(t, &Step{Session: sid, Open: open, Entry: r.h.ID(), Hops: []Hop{{b.ID(), 4, 8}},
		Tokens: []int32{1}, Hidden: make([]float32, dim), Cols: dim}))
	waitFor(t, 2*time.Second, "the session", func() bool { return b.Metrics().Sessions == 1 })

	if err := b.warm.Release(ctx, 2, layers.Range{Start: 0, End: 4}); err != nil {
		t.Fatal(err)
	}
	loaded := func() int { return b.svc.sched.status.Load().Loaded }
	if got := b.ann.held(); got != (layers.Range{Start: 0, End: 4}) || loaded() != 8 {
		t.Fatalf("after the release: serving %v, %d layers loaded", got, loaded())
	}
	r.send(t, b.ID(), mustEncode(t, &Step{Session: newSessionID(), Open: open, Entry: r.h.ID(), Hops: []Hop{{b.ID(), 4, 8}},
		Tokens: []int32{1}, Hidden: make([]float32, dim), Cols: dim}))
	r.expect(t, CodeNotServing, "a new session on released layers")
	r.send(t, b.ID(), mustEncode(t, &Close{Session: sid}))
	waitFor(t, 2*time.Second, "the released layers freed", func() bool { return loaded() == 4 })

	// And back: a warmup loads them again beside what is served.
	if err := b.warm.Load(ctx, 3, layers.Range{Start: 0, End: 8}); err != nil {
		t.Fatal(err)
	}
	if got := b.ann.held(); got != (layers.Range{Start: 0, End: 8}) {
		t.Fatalf("after the load: %v", got)
	}
}
