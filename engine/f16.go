package engine

// F16ToF32 converts an IEEE half to float32 exactly. It is the one half
// conversion of the module: node/wire sends hidden states as halves.
func F16ToF32(h uint16) float32 { return f16ToF32(h) }

// F32ToF16 rounds a float32 to the nearest IEEE half, ties to even;
// overflow gives infinity and a NaN stays a NaN.
func F32ToF16(f float32) uint16 { return f32ToF16(f) }
