package engine

//go:noescape
func attnAV64(out *float32, v *float32, vstride int, p *float32, np int)

// attnAV adds Σ_j p[j]·v[j·stride:][:len(out)] to out, j in order, each
// output its own sequential sum (the portable loop's bits), 64 outputs a
// kernel call where the CPU has AVX.
func attnAV(out, v []float32, stride int, p []float32) {
	i := 0
	if useSIMD && hasAVX && len(p) > 0 {
		_ = v[(len(p)-1)*stride+len(out)-1]
		for ; i+64 <= len(out); i += 64 {
			attnAV64(&out[i], &v[i], stride, &p[0], len(p))
		}
	}
	attnAVPortable(out[i:], v[i:], stride, p)
}
