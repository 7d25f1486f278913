package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/internal/codec"
	"github.com/stratanet/strata/swarm"
)

// The steal protocol's frames (steal.go), one per swarm frame, in
// little-endian binary through internal/codec:
//
//	ask:   kind=1, min wait in ns (uvarint)
//	none:  kind=2
//	hand:  kind=3, max tokens (u32), tokens (u32 count, u32 each),
//	       sampling (as an activation frame's open: temperature f32,
//	       top-k u32, top-p f32, min-keep u32, seed u64, repeat penalty
//	       f32, repeat window u32), stop strings (u8 count, u16 length and
//	       bytes each), profile (u8 length and bytes)
//	tok:   kind=4, token (u32)
//	done:  kind=5
//	error: kind=6, message (u16 length and bytes)
//
// Nothing may follow a frame's fields. A handover's tokens and a token
// frame's token are at most math.MaxInt32.

// stealMaxFrame bounds a steal frame: a handover carries at most a
// context's worth of token IDs, 4 bytes each.
const stealMaxFrame = 4 << 20

// Limits on a handover's fields beyond the frame bound.
const (
	stealMaxStops   = 16
	stealMaxStopLen = 1024
	stealMaxProfile = 255
	stealMaxErr     = 1024 // a longer error message is cut, not refused
)

// ErrBadSteal: a steal frame that is malformed or out of bounds.
var ErrBadSteal = errors.New("bad steal frame")

// stealKind is a steal frame's kind.
type stealKind uint8

// Steal frame kinds.
const (
	stealAsk   stealKind = 1 // thief → victim: any work?
	stealNone  stealKind = 2 // victim → thief: nothing to hand over
	stealHand  stealKind = 3 // victim → thief: the handover
	stealToken stealKind = 4 // thief → victim: one generated token
	stealDone  stealKind = 5 // thief → victim: the generation ended normally
	stealFail  stealKind = 6 // thief → victim: it could not run or finish it
)

func (k stealKind) String() string {
	switch k {
	case stealAsk:
		return "ask"
	case stealNone:
		return "none"
	case stealHand:
		return "hand"
	case stealToken:
		return "tok"
	case stealDone:
		return "done"
	case stealFail:
		return "error"
	}
	return fmt.Sprintf("kind %d", uint8(k))
}

// handover is the request a victim hands a thief.
type handover struct {
	Tokens    []int32
	MaxTokens int
	Sampling  engine.SamplingParams
	Stop      []string
	Profile   string
}

// stealMsg is one frame of the steal protocol.
type stealMsg struct {
	Kind  stealKind
	Hand  *handover // stealHand
	Token int32     // stealToken
	Err   string    // stealFail
	// MinWait (an ask's): hand over a head only if it waited at least
	// this long. A thief with a queue of its own sends its head's wait,
	// so that it never takes a younger request than its own.
	MinWait time.Duration
}

// encodeSteal checks and encodes one frame.
func encodeSteal(m stealMsg) ([]byte, error) {
	w := codec.NewWriter(nil, binary.LittleEndian, ErrBadSteal)
	if m.MinWait < 0 || (m.MinWait != 0 && m.Kind != stealAsk) {
		w.Fail("min wait %v on a %v frame", m.MinWait, m.Kind)
	}
	w.U8(uint8(m.Kind))
	switch m.Kind {
	case stealAsk:
		w.Uvarint(uint64(m.MinWait))
	case stealNone, stealDone:
	case stealToken:
		if m.Token < 0 {
			w.Fail("token %d", m.Token)
		}
		w.U32(uint32(m.Token))
	case stealFail:
		msg := m.Err
		if len(msg) > stealMaxErr {
			msg = msg[:stealMaxErr]
		}
		w.Bytes16("error", []byte(msg), stealMaxErr)
	case stealHand:
		encodeHandover(w, m.Hand)
	default:
		w.Fail("%v", m.Kind)
	}
	if w.Err() == nil && w.Len() > stealMaxFrame {
		w.Fail("frame of %d bytes (max %d)", w.Len(), stealMaxFrame)
	}
	return w.Bytes(), w.Err()
}

func encodeHandover(w *codec.Writer, h *handover) {
	if h == nil {
		w.Fail("a handover without a request")
		return
	}
	sp := h.Sampling
	switch {
	case len(h.Tokens) == 0 || h.MaxTokens <= 0 || h.MaxTokens > math.MaxUint32:
		w.Fail("%d tokens, max tokens %d", len(h.Tokens), h.MaxTokens)
	case len(h.Stop) > stealMaxStops:
		w.Fail("%d stop strings", len(h.Stop))
	case sp.TopK < 0 || sp.MinKeep < 0 || sp.RepeatLastN < 0 ||
		sp.TopK > math.MaxUint32 || sp.MinKeep > math.MaxUint32 || sp.RepeatLastN > math.MaxUint32:
		w.Fail("sampling %+v", sp)
	}
	w.U32(uint32(h.MaxTokens))
	w.U32(uint32(len(h.Tokens)))
	for _, t := range h.Tokens {
		if t < 0 {
			w.Fail("a negative token")
		}
		w.U32(uint32(t))
	}
	w.F32(sp.Temperature)
	w.U32(uint32(sp.TopK))
	w.F32(sp.TopP)
	w.U32(uint32(sp.MinKeep))
	w.U64(sp.Seed)
	w.F32(sp.RepeatPenalty)
	w.U32(uint32(sp.RepeatLastN))
	w.U8(uint8(len(h.Stop)))
	for _, s := range h.Stop {
		w.Bytes16("stop string", []byte(s), stealMaxStopLen)
	}
	w.Bytes8("profile", []byte(h.Profile), stealMaxProfile, true)
}

// decodeSteal parses and checks one frame.
func decodeSteal(b []byte) (stealMsg, error) {
	r := codec.NewReader(b, binary.LittleEndian, ErrBadSteal)
	m := stealMsg{Kind: stealKind(r.U8("kind"))}
	switch m.Kind {
	case stealAsk:
		m.MinWait = time.Duration(r.Uvarint("min wait", math.MaxInt64))
	case stealNone, stealDone:
	case stealToken:
		m.Token = int32(r.U32("token"))
		if r.Err() == nil && m.Token < 0 {
			r.Fail("token %d", uint32(m.Token))
		}
	case stealFail:
		m.Err = string(r.Bytes16("error", stealMaxErr))
	case stealHand:
		m.Hand = decodeHandover(r)
	default:
		r.Fail("%v", m.Kind)
	}
	r.End()
	if r.Err() != nil {
		return stealMsg{}, r.Err()
	}
	return m, nil
}

func decodeHandover(r *codec.Reader) *handover {
	h := &handover{MaxTokens: int(r.U32("max tokens"))}
	n := int(r.U32("token count"))
	switch {
	case r.Err() != nil:
		return nil
	case h.MaxTokens == 0 || n == 0:
		r.Fail("%d tokens, max tokens %d", n, h.MaxTokens)
		return nil
	case n > r.Len()/4:
		r.Fail("%d tokens in %d bytes", n, r.Len())
		return nil
	}
	h.Tokens = make([]int32, n)
	for i := range h.Tokens {
		h.Tokens[i] = int32(r.U32("token"))
		if r.Err() == nil && h.Tokens[i] < 0 {
			r.Fail("a negative token")
		}
	}
	sp := &h.Sampling
	sp.Temperature = r.F32("temperature")
	sp.TopK = int(r.U32("top-k"))
	sp.TopP = r.F32("top-p")
	sp.MinKeep = int(r.U32("min-keep"))
	sp.Seed = r.U64("seed")
	sp.RepeatPenalty = r.F32("repeat penalty")
	sp.RepeatLastN = int(r.U32("repeat window"))
	ns := int(r.U8("stop count"))
	if r.Err() == nil && ns > stealMaxStops {
		r.Fail("%d stop strings", ns)
	}
	for i := 0; i < ns && r.Err() == nil; i++ {
		h.Stop = append(h.Stop, string(r.Bytes16("stop string", stealMaxStopLen)))
	}
	h.Profile = string(r.Bytes8("profile", stealMaxProfile, true))
	return h
}

// writeSteal sends one frame.
func writeSteal(s *swarm.Stream, m stealMsg) error {
	b, err := encodeSteal(m)
	if err != nil {
		return err
	}
	return s.WriteFrame(b, stealMaxFrame)
}

// readSteal reads and checks one frame.
func readSteal(s *swarm.Stream) (stealMsg, error) {
	b, err := s.ReadFrame(stealMaxFrame)
	if err != nil {
		return stealMsg{}, err
	}
	return decodeSteal(b)
}
