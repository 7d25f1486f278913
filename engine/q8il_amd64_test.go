package engine

// q8SIMDPaths: the AVX2 kernel (on a CPU with VNNI, by turning useVNNI
// off) and the AVX-512 VNNI one, where this CPU has them, the latter's
// one-token kernel also in the variant (prefetching or not) that this
// CPU's vendor does not take.
func q8SIMDPaths() []q8Path {
	var ps []q8Path
	if !useSIMD || !hasAVX2 {
		return nil
	}
	ps = append(ps, q8Path{"avx2", func() func() { setVNNI(false); return func() { setVNNI(true) } }})
	if hasVNNI {
		ps = append(ps, q8Path{"avx512-vnni", func() func() { return func() {} }})
		ps = append(ps, q8Path{"avx512-vnni, other 1-token kernel", func() func() {
			saved := q8ilVNNI[1]
			q8ilVNNI[1] = q8ilVNNI1
			if !cpuIntel {
				q8ilVNNI[1] = q8ilVNNI1PF
			}
			return func() { q8ilVNNI[1] = saved }
		}})
	}
	return ps
}

func hasVNNIKernel() bool { return hasVNNI }

func setVNNI(on bool) { useVNNI = on }
