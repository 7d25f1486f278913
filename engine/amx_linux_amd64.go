package engine

import "syscall"

// hasAMX: AMX-TILE and AMX-INT8 (CPUID.(7,0):EDX bits 24 and 25), tile
// state the OS saves (XCR0 bits 17 and 18), and Linux's leave to use it,
// which a process asks for once (arch_prctl ARCH_REQ_XCOMP_PERM with
// XFEATURE_XTILEDATA): without it the first tile instruction faults.
var hasAMX = func() bool {
	if !hasAVX512 {
		return false
	}
	if maxID, _, _, _ := cpuid(0, 0); maxID < 7 {
		return false
	}
	if _, _, _, edx := cpuid(7, 0); edx&(3<<24) != 3<<24 {
		return false
	}
	if xcr0, _ := xgetbv0(); xcr0&(3<<17) != 3<<17 {
		return false
	}
	const archReqXcompPerm, xfeatureXtiledata = 0x1023, 18
	_, _, errno := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXtiledata, 0)
	return errno == 0
}()
