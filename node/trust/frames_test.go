package trust

import (
	"crypto/rand"
	"errors"
	"math"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
)

func newKey(t *testing.T) (crypto.PrivKey, peer.ID) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return k, id
}

// A frame signed over the rows a hop sent verifies at the next hop, whose
// input chain then equals the sender's output chain; a frame with one
// bit of one row flipped, or signed by another key, does not.
func TestFrameSignature(t *testing.T) {
	key, id := newKey(t)
	other, _ := newKey(t)
	const cols = 4
	sid := SessionID{7}
	tokens := []int32{11, 12, 13}
	rows := make([]float32, len(tokens)*cols)
	for i := range rows {
		rows[i] = float32(i) * 0.25
	}
	send, recv := NewChains(), NewChains()
	send.Add(tokens, nil, 0, rows, nil, false)

	frame := func(k crypto.PrivKey, lie []float32) consensus.Receipt {
		var lc [32]byte
		if lie != nil {
			c := NewChains()
			c.Add(tokens, nil, 0, lie, nil, false)
			lc = c.OutChain()
		}
		kid, err := peer.IDFromPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		r := send.FrameReceipt(kid, sid, 9, 0, 2, len(tokens), lie, lc, cols)
		if err := Signer(k)(&r); err != nil {
			t.Fatal(err)
		}
		// What the frame carries; the receiver rebuilds the rest, with the
		// signer the stream's peer (id).
		return consensus.Receipt{Signer: id, Session: sid, Model: 9, From: 0, To: 2, Positions: len(tokens), InChain: r.InChain, Sig: r.Sig}
	}

	got, err := recv.VerifyFrame(frame(key, nil), rows, cols)
	if err != nil {
		t.Fatalf("an honest frame: %v", err)
	}
	recv.Add(tokens, rows, 0, make([]float32, len(rows)), nil, false)
	if got.OutChain != send.OutChain() || recv.InChain() != send.OutChain() {
		t.Fatal("the receiver's input chain is not the sender's output chain")
	}

	flipped := append([]float32(nil), rows...)
	flipped[5] = math.Float32frombits(math.Float32bits(flipped[5]) ^ 1)
	fresh := NewChains()
	if _, err := fresh.VerifyFrame(frame(key, nil), flipped, cols); !errors.Is(err, ErrSignature) {
		t.Fatalf("rows other than signed: %v, want ErrSignature", err)
	}
	if _, err := fresh.VerifyFrame(frame(other, nil), rows, cols); !errors.Is(err, ErrSignature) {
		t.Fatalf("another key's signature: %v, want ErrSignature", err)
	}
	// A hop that sends other rows than it computed signs what it sent.
	if _, err := fresh.VerifyFrame(frame(key, flipped), flipped, cols); err != nil {
		t.Fatalf("a frame signed over the rows sent: %v", err)
	}
	if fresh.Pos() != 0 {
		t.Fatal("VerifyFrame folded the rows")
	}
}

// The chains resumed at a block boundary are a cold run's there, and go
// on alike.
func TestChainsAtBlock(t *testing.T) {
	toks := make([]int32, 2*block+3)
	for i := range toks {
		toks[i] = int32(i * 31)
	}
	cold := NewChains()
	cold.Add(toks, nil, 0, nil, []float32{1, 2}, true)
	head := NewChains()
	head.Add(toks[:block], nil, 0, nil, []float32{1, 2}, true)
	warm, ok := ChainsAt(head.Marks(), block)
	if !ok {
		t.Fatal("marks at a whole block do not restore")
	}
	warm.Add(toks, nil, block, nil, []float32{1, 2}, true)
	if warm.InChain() != cold.InChain() || warm.Pos() != cold.Pos() || len(warm.Marks()) != len(cold.Marks()) {
		t.Fatal("a resumed chain differs from a cold one")
	}
	if _, ok := ChainsAt(head.Marks(), block+1); ok {
		t.Fatal("restored at a position off a block boundary")
	}
	if _, ok := ChainsAt(head.Marks(), 2*block); ok {
		t.Fatal("restored past the marks")
	}
}

// A receipt reaches the check waiting for it only from its signer, or
// from the hop named to relay it, and only with a valid signature.
func TestReceiptsDeliver(t *testing.T) {
	key, signer := newKey(t)
	_, via := newKey(t)
	_, stranger := newKey(t)
	sid := SessionID{3}
	c := NewChains()
	c.Add([]int32{1, 2}, nil, 0, []float32{1, 2, 3, 4}, nil, false)
	r := c.Receipt(signer, sid, 5, 0, 4, 2)
	if err := Signer(key)(&r); err != nil {
		t.Fatal(err)
	}
	var rs Receipts
	ch, done := rs.Wait(ReceiptKey{Session: sid, From: 0}, signer, via)
	defer done()
	if rs.Deliver(stranger, sid, r) {
		t.Fatal("took a receipt from a third node")
	}
	bad := r
	bad.Positions++
	if rs.Deliver(signer, sid, bad) {
		t.Fatal("took a receipt whose signature does not verify")
	}
	if rs.Deliver(signer, SessionID{4}, r) {
		t.Fatal("took a receipt of another session")
	}
	if !rs.Deliver(via, sid, r) {
		t.Fatal("refused the relaying hop's receipt")
	}
	if got := <-ch; got.Signer != signer || got.Positions != 2 {
		t.Fatalf("delivered %+v", got)
	}
	done()
	if rs.Deliver(signer, sid, r) {
		t.Fatal("took a receipt after the wait ended")
	}
}
