package node

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/swarm"
)

// frameSigner signs the frames of one session as an honest hop of
// layers [from, receiver) would: its receipt over the rows it sent.
type frameSigner struct {
	key   crypto.PrivKey
	id    peer.ID
	model uint64
	from  int
	out   hash.Hash
}

func newFrameSigner(h *swarm.Host, model uint64, from int) *frameSigner {
	return &frameSigner{key: h.Key(), id: h.ID(), model: model, from: from, out: sha256.New()}
}

func rowBytes(v []float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}

// receipt folds m's rows into the chain of what was sent and returns the
// receipt over it, unsigned.
func (f *frameSigner) receipt(m *Step) consensus.Receipt {
	rows := rowBytes(m.Hidden)
	f.out.Write(rows)
	r := consensus.Receipt{Signer: f.id, Session: m.Session, Model: f.model, From: f.from, To: m.Hops[0].From,
		Positions: m.Pos + len(m.Tokens), InChain: [32]byte{7}, OutLast: sha256.Sum256(rows[len(rows)-4*m.Cols:])}
	f.out.Sum(r.OutChain[:0])
	return r
}

func (f *frameSigner) signWith(t *testing.T, key crypto.PrivKey, r consensus.Receipt, m *Step) *Step {
	t.Helper()
	if err := r.Sign(key); err != nil {
		t.Fatal(err)
	}
	m.Sig = &FrameSig{From: r.From, InChain: r.InChain, Sig: r.Sig}
	return m
}

// sign signs m as f's host, over what m carries.
func (f *frameSigner) sign(t *testing.T, m *Step) *Step { return f.signWith(t, f.key, f.receipt(m), m) }

// TestFrameSignatures: a hop refuses, as its sender's fault, a frame of
// hidden states that is unsigned, signed over other rows, or signed with
// another node's key (an honest node's frame cannot be forged: the
// signer is the authenticated sender); a properly signed one is computed,
// and the hop hands the sender's receipt over what it sent to the
// session's entry (upstream audit), and to nobody else.
func TestFrameSignatures(t *testing.T) {
	dirs, ids := staticIDs(t, 2)
	m, err := layers.NewLayerMap(8, 1, layers.Stage{Node: ids[0].String(), Range: layers.Range{Start: 0, End: 4}},
		layers.Stage{Node: ids[1].String(), Range: layers.Range{Start: 4, End: 8}})
	if err != nil {
		t.Fatal(err)
	}
	c := newTestCluster(t, WithStaticMap(m))
	a, b := c.add(WithDataDir(dirs[0])), c.add(WithDataDir(dirs[1]))
	c.waitServing(20*time.Second, ids...)
	r, other := newRogue(t), newRogue(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, x := range []*rogue{r, other} {
		if err := x.h.Connect(ctx, b.host.AddrInfo()); err != nil {
			t.Fatal(err)
		}
	}
	self := r.h.ID()
	hops := []Hop{{b.ID(), 4, 8}}
	open := &Open{MaxTokens: 16, Model: ModelHash(a.Model().Fingerprint)}
	dim := a.Model().Hidden
	rows := func(n int) []float32 {
		v := make([]float32, n*dim)
		for i := range v {
			v[i] = float32(i%7) * 0.25
		}
		return v
	}
	step := func(sid SessionID, pos int, tokens ...int32) *Step {
		s := &Step{Session: sid, Entry: self, Hops: hops, Pos: pos, Tokens: tokens, Hidden: rows(len(tokens)), Cols: dim}
		if pos == 0 {
			s.Open = open
		}
		return s
	}
	refused := func(what string, wantErr error) {
		t.Helper()
		select {
		case e := <-r.replies:
			if e.Code != CodeBadFrame || e.Peer != self || !strings.Contains(e.Text, strings.TrimPrefix(wantErr.Error(), ErrBadFrame.Error()+": ")) {
				t.Fatalf("%s: reply %s at %s (%s), want %s blaming the sender: %v", what, e.Code, shortID(e.Peer), e.Text, CodeBadFrame, wantErr)
			}
			t.Logf("%s: %s", what, e.Text)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no error reply", what)
		}
	}
	bad0 := b.counters.badFramesFrom(self)

	r.send(t, b.ID(), mustEncode(t, step(newSessionID(), 0, 1, 2)))
	refused("unsigned", ErrUnsignedFrame)

	fs := newFrameSigner(r.h, open.Model, 0)
	s := fs.sign(t, step(newSessionID(), 0, 1, 2))
	s.Hidden[3] += 1 // signed, then changed on the way
	r.send(t, b.ID(), mustEncode(t, s))
	refused("signed over other rows", ErrFrameSignature)

	// The rogue presents a frame signed by a (the honest node): the
	// stream says who sent it, and a's signature does not verify as
	// the rogue's.
	fa := newFrameSigner(r.h, open.Model, 0)
	s = step(newSessionID(), 0, 1, 2)
	ra := fa.receipt(s)
	ra.Signer = a.ID()
	r.send(t, b.ID(), mustEncode(t, fa.signWith(t, a.host.Key(), ra, s)))
	refused("a's signature, sent by another", ErrFrameSignature)
	if got := b.counters.badFramesFrom(self) - bad0; got != 3 {
		t.Fatalf("%d refused frames counted against the sender, want 3", got)
	}

	// Signed over what it carries: computed, twice, and the receipt over
	// both frames goes to the entry on its ask.
	sid := newSessionID()
	fs = newFrameSigner(r.h, open.Model, 0)
	r.send(t, b.ID(), mustEncode(t, fs.sign(t, step(sid, 0, 1, 2))))
	r.token(t, sid, "the signed session's first token")
	r.send(t, b.ID(), mustEncode(t, fs.sign(t, step(sid, 2, 3))))
	r.token(t, sid, "the signed session's second token")
	other.send(t, b.ID(), mustEncode(t, &UpAudit{Session: sid, From: 4}))
	r.send(t, b.ID(), mustEncode(t, &UpAudit{Session: sid, From: 4}))
	select {
	case got := <-r.receipts:
		if err := got.Receipt.Verify(); err != nil || got.Receipt.Signer != self || got.Receipt.Positions != 3 ||
			got.Receipt.From != 0 || got.Receipt.To != 4 {
			t.Fatalf("upstream receipt %+v (verify: %v)", got.Receipt, err)
		}
		chain := sha256.New()
		chain.Write(rowBytes(rows(2)))
		chain.Write(rowBytes(rows(1)))
		if !slices.Equal(chain.Sum(nil), got.Receipt.OutChain[:]) {
			t.Fatalf("the receipt's output chain is not over the rows sent")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no upstream receipt")
	}
	select {
	case got := <-other.receipts:
		t.Fatalf("a stranger got the session's receipt: %+v", got)
	default:
	}

	// The honest path signs and checks every frame, and is unchanged.
	const prompt = "Once upon a time"
	got, err := a.Complete(ctx, Request{Prompt: prompt, MaxTokens: 12, Sampling: engineGreedy()})
	if err != nil {
		t.Fatal(err)
	}
	if ref := reference(t, prompt, 12, engineGreedy()); !slices.Equal(got.Tokens, ref) {
		t.Fatalf("signed swarm: %v, single process %v", got.Tokens, ref)
	}
	if n := b.counters.badFramesFrom(a.ID()); n != 0 {
		t.Fatalf("%d of an honest node's frames refused", n)
	}
	if !errors.Is(ErrFrameSignature, ErrBadFrame) || !errors.Is(ErrUnsignedFrame, ErrBadFrame) {
		t.Fatal("frame signature errors do not wrap ErrBadFrame")
	}
}
