package engine

import (
	"syscall"
	"unsafe"
)

// hugePage is a transparent huge page's size on amd64 and arm64.
const hugePage = 2 << 20

// allocWeights allocates n bytes for weights that a decode streams whole.
// With 4 KiB pages a stream of several rows at once walks the page tables
// every few lines, so a buffer of a huge page or more asks the kernel for
// transparent huge pages (granted on request under THP's "madvise"
// setting). The kernel maps one only over an aligned 2 MiB extent that is
// advised whole and untouched when first written, so the buffer starts on
// a 2 MiB boundary of a slightly longer allocation and is advised before
// the loader writes it: advised where it happened to lie, a TinyLlama-shaped
// Q4_K_M stage had 408 MB of its 830 resident on huge pages, its 2.4 MB
// matrices none. The slack (under 2 MiB a buffer) is address space the
// engine never writes.
func allocWeights(n int) []byte {
	if n < hugePage {
		return make([]byte, n)
	}
	buf := make([]byte, n+hugePage)
	off := int(-uintptr(unsafe.Pointer(unsafe.SliceData(buf))) & (hugePage - 1))
	b := buf[off : off+n : off+n]
	_ = syscall.Madvise(b[:n&^(hugePage-1)], syscall.MADV_HUGEPAGE) // advice only
	return b
}
