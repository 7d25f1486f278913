package engine

import (
	"fmt"
	"math"
)

// DType is a ggml tensor type as GGUF stores it.
type DType uint32

// The ggml tensor types. F32, F16, BF16, Q8_0 and the packed types of
// quant.go can be computed with; the rest are listed so that a file holding them is read (and its other
// tensors used) and the error names the type.
const (
	F32     DType = 0
	F16     DType = 1
	Q4_0    DType = 2
	Q4_1    DType = 3
	Q5_0    DType = 6
	Q5_1    DType = 7
	Q8_0    DType = 8
	Q8_1    DType = 9
	Q2_K    DType = 10
	Q3_K    DType = 11
	Q4_K    DType = 12
	Q5_K    DType = 13
	Q6_K    DType = 14
	Q8_K    DType = 15
	IQ2_XXS DType = 16
	IQ2_XS  DType = 17
	IQ3_XXS DType = 18
	IQ1_S   DType = 19
	IQ4_NL  DType = 20
	IQ3_S   DType = 21
	IQ2_S   DType = 22
	IQ4_XS  DType = 23
	I8      DType = 24
	I16     DType = 25
	I32     DType = 26
	I64     DType = 27
	F64     DType = 28
	IQ1_M   DType = 29
	BF16    DType = 30
	TQ1_0   DType = 34
	TQ2_0   DType = 35
	MXFP4   DType = 39
)

type dtypeInfo struct {
	name  string
	block int // elements per block
	bytes int // bytes per block
}

// dtypes holds ggml's block layout of every type, so that a file's data
// extents can be checked even for tensors this stage never loads.
var dtypes = map[DType]dtypeInfo{
	F32: {"f32", 1, 4}, F16: {"f16", 1, 2}, Q4_0: {"q4_0", 32, 18}, Q4_1: {"q4_1", 32, 20},
	Q5_0: {"q5_0", 32, 22}, Q5_1: {"q5_1", 32, 24}, Q8_0: {"q8_0", 32, 34}, Q8_1: {"q8_1", 32, 36},
	Q2_K: {"q2_k", 256, 84}, Q3_K: {"q3_k", 256, 110}, Q4_K: {"q4_k", 256, 144}, Q5_K: {"q5_k", 256, 176},
	Q6_K: {"q6_k", 256, 210}, Q8_K: {"q8_k", 256, 292}, IQ2_XXS: {"iq2_xxs", 256, 66}, IQ2_XS: {"iq2_xs", 256, 74},
	IQ3_XXS: {"iq3_xxs", 256, 98}, IQ1_S: {"iq1_s", 256, 50}, IQ4_NL: {"iq4_nl", 32, 18}, IQ3_S: {"iq3_s", 256, 110},
	IQ2_S: {"iq2_s", 256, 82}, IQ4_XS: {"iq4_xs", 256, 136}, I8: {"i8", 1, 1}, I16: {"i16", 1, 2},
	I32: {"i32", 1, 4}, I64: {"i64", 1, 8}, F64: {"f64", 1, 8}, IQ1_M: {"iq1_m", 256, 56},
	BF16: {"bf16", 1, 2}, TQ1_0: {"tq1_0", 256, 54}, TQ2_0: {"tq2_0", 256, 66}, MXFP4: {"mxfp4", 32, 17},
}

func (t DType) String() string {
	if i, ok := dtypes[t]; ok {
		return i.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// Supported reports whether the engine can compute with weights of type t.
func (t DType) Supported() bool {
	return t == F32 || t == F16 || t == BF16 || t == Q8_0 || quantFormats[t] != nil
}

// supportedNames lists the types the engine computes with, for errors.
func supportedNames() string {
	s := "f32, f16, bf16, q8_0"
	for _, t := range []DType{Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q4_K, Q5_K, Q6_K, IQ4_XS, MXFP4} {
		s += ", " + t.String()
	}
	return s
}

// ParseDType parses a type name such as "f32" or "q8_0".
func ParseDType(s string) (DType, error) {
	for t, i := range dtypes {
		if i.name == s {
			return t, nil
		}
	}
	return 0, fmt.Errorf("%w: %q", ErrUnsupportedType, s)
}

// rowBytes is the size of n elements of type t, or false if n is not a
// whole number of blocks or t is unknown.
func rowBytes(t DType, n uint64) (uint64, bool) {
	i, ok := dtypes[t]
	if !ok || n%uint64(i.block) != 0 {
		return 0, false
	}
	return n / uint64(i.block) * uint64(i.bytes), true
}

// f16ToF32 converts an IEEE half to float32 exactly.
func f16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal half: normalise.
	e := uint32(113)
	for man&0x400 == 0 {
		man <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
}

// f32ToF16 rounds a float32 to the nearest half, ties to even.
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00 // NaN
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint32(14 - e)
		half := man >> shift
		rem := man & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || (rem == mid && half&1 == 1) {
			half++
		}
		return sign | uint16(half)
	}
	h := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, which is still right (up to inf)
	}
	return sign | uint16(h)
}

func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// f32ToBF16 rounds to nearest even, keeping NaNs NaN.
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// quantizeQ8Block quantises 32 values as ggml's quantize_row_q8_0 does:
// scale = max|x|/127 stored as f16, q = round(x/scale).
func quantizeQ8Block(x []float32, q []int8) (d uint16) {
	amax := float32(0)
	for _, v := range x[:32] {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax = a
		}
	}
	s := amax / 127
	id := float32(0)
	if s != 0 {
		id = 1 / s
	}
	for i, v := range x[:32] {
		// Clamped so that no value is -128: the SIMD kernel negates
		// activations, and -(-128) does not fit an int8.
		q[i] = int8(max(-127, min(127, roundAway(v*id))))
	}
	return f32ToF16(s)
}

// roundAway is C's roundf: halves away from zero.
func roundAway(v float32) float32 {
	return float32(math.Round(float64(v)))
}
