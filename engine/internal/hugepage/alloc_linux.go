package hugepage

import (
	"syscall"
	"unsafe"
)

// Alloc allocates n bytes, asking the kernel for transparent huge pages
// where n is a huge page or more (granted on request under THP's "madvise"
// setting). The kernel maps one only over an aligned 2 MiB extent that is
// advised whole and untouched when first written, so the buffer starts on
// a 2 MiB boundary of a slightly longer allocation and is advised before
// the caller writes it. The slack (under 2 MiB a buffer) is address space
// that is never written.
func Alloc(n int) []byte {
	if n < Size {
		return make([]byte, n)
	}
	buf := make([]byte, n+Size)
	off := int(-uintptr(unsafe.Pointer(unsafe.SliceData(buf))) & (Size - 1))
	b := buf[off : off+n : off+n]
	_ = syscall.Madvise(b[:n&^(Size-1)], syscall.MADV_HUGEPAGE) // advice only
	return b
}
