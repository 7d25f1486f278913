package engine

import "syscall"

// allocWeights allocates n bytes for weights that a decode streams whole,
// asking the kernel for transparent huge pages (where it grants them on
// request, as with THP's "madvise" setting): with 4 KiB pages a stream of
// several rows at once walks the page tables every few lines.
func allocWeights(n int) []byte {
	b := make([]byte, n)
	if n >= 4<<20 {
		_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE) // advice only
	}
	return b
}
