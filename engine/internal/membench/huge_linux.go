//go:build linux && (amd64 || arm64)

package membench

import (
	"syscall"
	"unsafe"
)

// adviseHugePages asks for huge pages on the whole 2 MiB pages of buf
// before it is first written (as the engine does for its tensors).
func adviseHugePages(buf []uint64) {
	const huge = 2 << 20
	if len(buf)*8 < huge {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(buf))), len(buf)*8)
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := (p + huge - 1) &^ (huge - 1)
	hi := (p + uintptr(len(b))) &^ (huge - 1)
	if hi > lo {
		_ = syscall.Madvise(b[lo-p:hi-p], syscall.MADV_HUGEPAGE)
	}
}
