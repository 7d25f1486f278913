package engine

//go:noescape
func attnAV64(out *float32, v *float32, vstride int, p *float32, np int)

//go:noescape
func attnAV64Z(out *float32, v *float32, vstride int, p *float32, np int)

// attnAV adds Σ_j p[j]·v[j·stride:][:len(out)] to out, j in order, each
// output its own sequential sum (the portable loop's bits), 64 outputs a
// kernel call where the CPU has AVX (AVX-512: 16 lanes a register).
func attnAV(out, v []float32, stride int, p []float32) {
	i := 0
	if useSIMD && hasAVX && len(p) > 0 {
		_ = v[(len(p)-1)*stride+len(out)-1]
		kernel := attnAV64
		if hasAVX512 {
			kernel = attnAV64Z
		}
		for ; i+64 <= len(out); i += 64 {
			kernel(&out[i], &v[i], stride, &p[0], len(p))
		}
	}
	if i < len(out) { // the portable loop walks p even for no outputs
		attnAVPortable(out[i:], v[i:], stride, p)
	}
}

//go:noescape
func maxF32(s *float32, n int) float32

//go:noescape
func expF32(s *float32, n int, m float32, c *float32)

//go:noescape
func scaleF32(s *float32, n int, f float32)

// scale multiplies each value by f in place, 16 a step where the CPU has
// AVX-512 (each product rounded once either way).
func scale(s []float32, f float32) {
	if !useSIMD || !hasAVX512 || len(s) == 0 {
		scalePortable(s, f)
		return
	}
	scaleF32(&s[0], len(s), f)
}

//go:noescape
func siluMulF32(gate, up *float32, n int, c *float32)

// siluMul is siluMulPortable's bits, 16 values a step where the CPU has
// AVX-512.
func siluMul(g, u []float32) {
	if !useSIMD || !hasAVX512 || len(g) == 0 {
		siluMulPortable(g, u)
		return
	}
	_ = u[len(g)-1]
	siluMulF32(&g[0], &u[0], len(g), &expConsts[0])
}

// softmax is softmaxPortable's bits: the max, the exponentials and the
// scaling 16 values a step where the CPU has AVX-512, the sum in order.
// (Summing in lanes instead moved one of refcheck's quantised models past
// its bound against ggml, 0.0147 → 0.0209: activations quantised from
// slightly other hidden states round differently.)
func softmax(s []float32) { softmaxRows(s, len(s), nil) }

// softmaxSink is softmaxSinkPortable's bits, as softmax is softmaxPortable's.
func softmaxSink(s []float32, sink float32) { softmaxRows(s, len(s), []float32{sink}) }

// softmaxRows is softmax (sinks nil) or softmaxSink with sinks[g] on each
// row g of n values in s. The rows' sums run side by side, each still in
// its own order: one sum alone waits on every add.
func softmaxRows(s []float32, n int, sinks []float32) {
	if !useSIMD || !hasAVX512 || n == 0 {
		softmaxRowsPortable(s, n, sinks)
		return
	}
	rows := len(s) / n
	var buf [2 * unitHeads]float32 // the rows' maxima and sums
	ms, sums := buf[:0:unitHeads], buf[unitHeads:unitHeads]
	if rows > unitHeads {
		ms, sums = make([]float32, 0, rows), make([]float32, 0, rows)
	}
	for g := 0; g < rows; g++ {
		m := maxF32(&s[g*n], n)
		if sinks != nil {
			m = max(m, sinks[g])
		}
		expF32(&s[g*n], n, m, &expConsts[0])
		ms = append(ms, m)
	}
	sums = rowSums(sums, s, n)
	for g := 0; g < rows; g++ {
		sum := sums[g]
		if sinks != nil {
			sum += expf(sinks[g] - ms[g])
		}
		scaleF32(&s[g*n], n, 1/sum)
	}
}

// rowSums appends the sum of each row of n values in s, each added in
// order from the first, four rows at a time.
func rowSums(sums, s []float32, n int) []float32 {
	rows := len(s) / n
	g := 0
	for ; g+4 <= rows; g += 4 {
		r0, r1, r2, r3 := s[g*n:(g+1)*n], s[(g+1)*n:(g+2)*n], s[(g+2)*n:(g+3)*n], s[(g+3)*n:(g+4)*n]
		r1, r2, r3 = r1[:len(r0)], r2[:len(r0)], r3[:len(r0)]
		var a0, a1, a2, a3 float32
		for i, v := range r0 {
			a0 += v
			a1 += r1[i]
			a2 += r2[i]
			a3 += r3[i]
		}
		sums = append(sums, a0, a1, a2, a3)
	}
	for ; g < rows; g++ {
		a := float32(0)
		for _, v := range s[g*n : (g+1)*n] {
			a += v
		}
		sums = append(sums, a)
	}
	return sums
}
