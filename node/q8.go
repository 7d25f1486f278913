package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The q8 wire dtype: 8-bit block quantization of hidden states, in the
// manner of ggml's Q8_0 but with a float32 scale (a float16 one overflows
// past 65504 × 127 and loses precision in subnormals; the extra two bytes
// per 32 values cost 6 %). Each row of a frame is cut into blocks of
// q8Block values (the last one may be shorter); a block is its scale
// d = max|x| / 127, then one int8 per value, q = round(x / d) clamped to
// −127..127, so that the decoded value is d × q. Every step is one IEEE
// float32 operation, so the same rows give the same bytes on any machine
// (what exact replay and spot checks rely on, verify.go).

// q8Block is the values sharing one scale.
const q8Block = 32

// Errors of the q8 codec.
var (
	// errQ8NonFinite: a row holds a NaN or an infinity, which no block
	// scale represents.
	errQ8NonFinite = errors.New("a non-finite hidden value cannot travel as q8")
	// errQ8Block: a forged block: a scale that is negative, NaN or
	// above MaxFloat32/127, or the value −128, which no encoder writes.
	errQ8Block = errors.New("malformed q8 block")
)

// q8RowBytes is the bytes one row of cols values takes.
func q8RowBytes(cols int) uint64 {
	nb := (uint64(cols) + q8Block - 1) / q8Block
	return 4*nb + uint64(cols)
}

// q8Check refuses rows the codec cannot carry.
func q8Check(x []float32) error {
	for i, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("%w: value %d is %v", errQ8NonFinite, i, v)
		}
	}
	return nil
}

// q8AppendRow appends one row's blocks to b. The row must be finite
// (q8Check).
func q8AppendRow(b []byte, row []float32) []byte {
	for lo := 0; lo < len(row); lo += q8Block {
		blk := row[lo:min(lo+q8Block, len(row))]
		var m float32
		for _, v := range blk {
			m = max(m, float32(math.Abs(float64(v))))
		}
		d := m / 127
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(d))
		for _, v := range blk {
			b = append(b, byte(q8Quant(v, d)))
		}
	}
	return b
}

// q8Quant is round(v / d) in −127..127 (0 when d is 0: a block of zeros,
// or of values so small that max/127 underflows).
func q8Quant(v, d float32) int8 {
	if d == 0 {
		return 0
	}
	q := math.Round(float64(v / d))
	return int8(max(-127, min(127, q)))
}

// q8DecodeRow decodes one row's blocks from raw (q8RowBytes(len(dst))
// bytes) into dst.
func q8DecodeRow(dst []float32, raw []byte) error {
	for lo := 0; lo < len(dst); lo += q8Block {
		hi := min(lo+q8Block, len(dst))
		d := math.Float32frombits(binary.LittleEndian.Uint32(raw))
		// An encoder's scale is at most MaxFloat32/127, so that d × q
		// stays finite.
		if !(d >= 0 && d <= math.MaxFloat32/127) {
			return fmt.Errorf("%w: scale %v of values %d..%d", errQ8Block, d, lo, hi-1)
		}
		raw = raw[4:]
		for i := lo; i < hi; i++ {
			q := int8(raw[i-lo])
			if q == -128 {
				return fmt.Errorf("%w: value %d is -128", errQ8Block, i)
			}
			dst[i] = d * float32(q)
		}
		raw = raw[hi-lo:]
	}
	return nil
}

// q8RoundTrip replaces x by what a q8 frame would deliver: what a hop
// computes on when its input came over a q8 link.
func q8RoundTrip(x []float32, cols int) error {
	if err := q8Check(x); err != nil {
		return err
	}
	var b []byte
	for r := 0; r+cols <= len(x); r += cols {
		b = q8AppendRow(b[:0], x[r:r+cols])
		if err := q8DecodeRow(x[r:r+cols], b); err != nil {
			return err
		}
	}
	return nil
}
