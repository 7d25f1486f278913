//go:build faultinject

package node

import (
	"encoding/binary"
	"fmt"
	"hash"
	"math"
	"slices"
	"time"
)

// The fault injector: test builds only (go test -tags faultinject), so
// that no release binary can be told to lie. A node built with it
// corrupts every Every-th output it computes, as a buggy or malicious
// volunteer would, and signs what it sends like an honest node.

// FaultMode is how an injected fault corrupts an output.
type FaultMode uint8

// The fault modes.
const (
	// FaultFlip flips the top mantissa bit of one value of the last row:
	// a silent error of up to 50% in one number.
	FaultFlip FaultMode = iota + 1
	// FaultStale sends the previous output of the same shape again.
	FaultStale
	// FaultSlow answers correctly but Delay late.
	FaultSlow
	// FaultNegate negates the last row: a gross error that changes the
	// tokens downstream.
	FaultNegate
	// FaultSendFlip computes, records and signs receipts honestly, but
	// flips a bit of the last row it sends (signing the frame over the
	// rows it sends, or the next hop would refuse it): a node that signs
	// one thing and sends another (sigframe.go).
	FaultSendFlip
)

// FaultSpec configures the injector.
type FaultSpec struct {
	Every int // corrupt one output in Every (1: all)
	Mode  FaultMode
	Delay time.Duration // FaultSlow
	// SignGo: the node's receipts name no engine (they claim the go
	// engine) whatever engine its heartbeats name: a liar that announces
	// another engine to escape exact checks and signs as go to escape a
	// tolerance verdict.
	SignGo bool
}

// WithFaultInjection makes the node corrupt its outputs (test builds).
func WithFaultInjection(f FaultSpec) Option {
	return func(c *config) error {
		if f.Every <= 0 || f.Mode < FaultFlip || f.Mode > FaultSendFlip {
			return fmt.Errorf("%w: fault spec %+v", ErrConfig, f)
		}
		c.fault = &injector{spec: f, sent: map[hopKey]hash.Hash{}}
		return nil
	}
}

// injector runs on the scheduler's loop only.
type injector struct {
	spec     FaultSpec
	n        int
	injected int
	prev     []float32
	// sent: the chains over what FaultSendFlip sent, per session it
	// lied in (it must go on signing the corrupted history).
	sent map[hopKey]hash.Hash
}

func (j *injector) lieSent(w *work, hs *hopSession) *sentLie {
	if j.spec.Mode != FaultSendFlip || len(w.x) == 0 {
		return nil
	}
	j.n++
	hit := j.n%j.spec.Every == 0
	sh := j.sent[hs.key]
	if !hit && sh == nil {
		return nil
	}
	if sh == nil {
		// The history sent so far is what was computed: go on from it.
		c, err := hs.chain.CloneOut()
		if err != nil {
			return nil
		}
		sh = c
		j.sent[hs.key] = sh
	}
	rows := slices.Clone(w.x)
	if hit {
		j.injected++
		k := len(rows) - 1 - (j.n*7919)%min(len(rows), 64)
		rows[k] = math.Float32frombits(math.Float32bits(rows[k]) ^ 1<<22)
	}
	b := make([]byte, 0, 4*len(rows))
	for _, v := range rows {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	sh.Write(b)
	lie := &sentLie{rows: rows}
	sh.Sum(lie.chain[:0])
	return lie
}

func (j *injector) receiptEngine(label string) string {
	if j.spec.SignGo {
		return ""
	}
	return label
}

func (j *injector) corrupt(w *work, last bool) {
	if j.spec.Mode == FaultSendFlip {
		return // lieSent
	}
	out := w.x
	if last {
		out = w.logits
	}
	j.n++
	hit := j.n%j.spec.Every == 0
	defer func() { j.prev = append(j.prev[:0], out...) }()
	if !hit || len(out) == 0 {
		return
	}
	j.injected++
	switch j.spec.Mode {
	case FaultFlip:
		k := len(out) - 1 - (j.n*7919)%min(len(out), 64)
		out[k] = math.Float32frombits(math.Float32bits(out[k]) ^ 1<<22)
	case FaultStale:
		if len(j.prev) == len(out) {
			copy(out, j.prev)
		} else {
			out[len(out)-1] = -out[len(out)-1] + 1
		}
	case FaultSlow:
		time.Sleep(j.spec.Delay)
	case FaultNegate:
		row := out[len(out)-min(len(out), len(out)/max(len(w.in.m.Tokens), 1)):]
		for i := range row {
			row[i] = -row[i]
		}
	}
}
