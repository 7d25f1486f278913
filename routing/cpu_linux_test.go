package routing

import "syscall"

// threadCPU is the CPU time the calling OS thread has used, in
// nanoseconds: benchmarks lock their thread and report it next to wall
// time, since a shared machine's wall time counts other people's work.
func threadCPU() int64 {
	const rusageThread = 1 // RUSAGE_THREAD
	var ru syscall.Rusage
	if syscall.Getrusage(rusageThread, &ru) != nil {
		return -1
	}
	return syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime)
}
