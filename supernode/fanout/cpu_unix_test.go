//go:build unix

package fanout

import "syscall"

// processCPU returns the CPU time (user and system) the process has used so
// far, in nanoseconds, or 0 if it cannot tell.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
