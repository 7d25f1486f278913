//go:build linux && (amd64 || arm64)

package engine

import (
	"syscall"
	"unsafe"
)

// adviseHugePages asks the kernel to back the whole 2 MiB pages inside b
// with huge pages, before b is first written. A decode step streams every
// weight once, and with 4 KiB pages it pays a TLB miss per page and its
// prefetchers stop at every page boundary: on a TinyLlama-shaped Q4_K_M
// file, huge pages made a decode step about 10% faster at 1 and 2 threads.
// Where transparent huge pages are off this does nothing; errors are
// ignored, since it changes only speed.
func adviseHugePages(b []byte) {
	const huge = 2 << 20
	if len(b) < huge {
		return
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := (p + huge - 1) &^ (huge - 1)
	hi := (p + uintptr(len(b))) &^ (huge - 1)
	if hi <= lo {
		return
	}
	_ = syscall.Madvise(b[lo-p:hi-p], syscall.MADV_HUGEPAGE)
}
