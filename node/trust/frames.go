package trust

import (
	"crypto/sha256"
	"errors"
	"hash"
	"sync"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
)

// Signed hops (docs/trust.md): every float32 frame of hidden states a
// hop sends carries its signature over the receipt it would sign after
// that step, with the output chain and last output of the rows on the
// wire. The frame's format is package node's (wire.go); the receipts,
// what is signed and what a receiver checks are here.

// ErrSignature: a frame's signature does not verify against its sender
// and the rows received.
var ErrSignature = errors.New("trust: the frame's signature does not verify")

// FrameReceipt is the unsigned receipt a hop signs for a frame it sends:
// its receipt as of now (Chains.Receipt) or, when it sends rows other
// than it computed (lie non-nil: a fault injector's), with the output
// chain over what it sent (lieChain) and the hash of lie's last row of
// hidden values.
func (c *Chains) FrameReceipt(signer peer.ID, sid SessionID, model uint64, from, to, positions int, lie []float32,
	lieChain [32]byte, hidden int) consensus.Receipt {
	r := c.Receipt(signer, sid, model, from, to, positions)
	if lie != nil {
		r.OutChain = lieChain
		r.OutLast = sha256.Sum256(c.floats(lie[len(lie)-hidden:]))
	}
	return r
}

// VerifyFrame checks a received frame's signature before it is
// computed: r is the sender's receipt as the frame and the authenticated
// stream give it (Signer, Session, Model, From, To, Positions, InChain,
// Sig), and rows the frame's hidden states, cols wide. It rebuilds what
// the receiver's input chain (c) will be once it folds the rows, which
// for an honest sender on the float32 wire is the sender's output chain,
// and returns the verified receipt; ErrSignature when it does not verify.
// c is left as it was.
func (c *Chains) VerifyFrame(r consensus.Receipt, rows []float32, cols int) (consensus.Receipt, error) {
	cl, err := c.in.(hash.Cloner).Clone()
	if err != nil {
		return r, err
	}
	b := c.floats(rows)
	cl.Write(b)
	cl.Sum(r.OutChain[:0])
	r.OutLast = sha256.Sum256(b[len(b)-4*cols:])
	if r.Verify() != nil {
		return r, ErrSignature
	}
	return r, nil
}

// Signer signs receipts with the host key; nil without one.
func Signer(key crypto.PrivKey) func(*consensus.Receipt) error {
	if key == nil {
		return nil
	}
	return func(r *consensus.Receipt) error { return r.Sign(key) }
}

// ReceiptKey names the receipt a check waits for: a session's, of the
// hop whose layers start at From.
type ReceiptKey struct {
	Session SessionID
	From    int
}

type receiptWait struct {
	signer peer.ID
	via    peer.ID // the hop that relays the signer's frame receipt; "" for none
	ch     chan consensus.Receipt
}

// Receipts routes receipts to the checks waiting for them; the zero
// value is ready. Safe for concurrent use.
type Receipts struct {
	mu    sync.Mutex
	waits map[ReceiptKey]receiptWait
}

// Wait registers a wait for signer's receipt k, which signer sends or
// via (the hop after it, which checked its frames; "" for none) relays.
// The receipt comes on the channel; done ends the wait.
func (r *Receipts) Wait(k ReceiptKey, signer, via peer.ID) (ch <-chan consensus.Receipt, done func()) {
	c := make(chan consensus.Receipt, 1)
	r.mu.Lock()
	if r.waits == nil {
		r.waits = map[ReceiptKey]receiptWait{}
	}
	r.waits[k] = receiptWait{signer: signer, via: via, ch: c}
	r.mu.Unlock()
	return c, func() {
		r.mu.Lock()
		delete(r.waits, k)
		r.mu.Unlock()
	}
}

// Deliver hands on a receipt of session sid that from sent: its signer
// itself (the stream is authenticated), or the hop after it relaying a
// frame receipt, for a check that waits for that signer's. Anything
// else, or a receipt whose signature does not verify, is dropped: it
// reports whether it was taken.
func (r *Receipts) Deliver(from peer.ID, sid SessionID, rc consensus.Receipt) bool {
	if rc.Session != sid {
		return false
	}
	r.mu.Lock()
	w, ok := r.waits[ReceiptKey{sid, rc.From}]
	r.mu.Unlock()
	if !ok || w.signer != rc.Signer || (from != w.signer && (w.via == "" || from != w.via)) || rc.Verify() != nil {
		return false
	}
	select {
	case w.ch <- rc:
		return true
	default:
		return false
	}
}
