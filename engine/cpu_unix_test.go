//go:build unix

package engine

import "syscall"

// cpuSeconds is the process's user+system CPU time: on a shared machine,
// tokens per CPU-second is what one dedicated core would give.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
