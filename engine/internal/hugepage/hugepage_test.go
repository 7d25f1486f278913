package hugepage

import (
	"testing"
	"unsafe"
)

// TestAlloc: a buffer of a huge page or more starts on a huge page's
// boundary and has exactly the length and capacity asked for; a smaller
// one is an ordinary slice of that length.
func TestAlloc(t *testing.T) {
	for _, n := range []int{0, 1, Size - 1, Size, Size + 1, 3*Size + 12345} {
		b := Alloc(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("Alloc(%d): len %d cap %d", n, len(b), cap(b))
		}
		if n >= Size && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%Size != 0 {
			t.Fatalf("Alloc(%d) starts at %p, not on a %d-byte boundary", n, unsafe.SliceData(b), Size)
		}
		for i := range b {
			b[i] = byte(i)
		}
	}
}
