//go:build linux

package testnet

import (
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// satPin pins every thread of this process to the given CPUs (threads the
// Go runtime starts later inherit the mask of the thread that starts them).
// An empty cpus unpins: every CPU of the machine. It returns false when
// the kernel refused.
func satPin(cpus []int) bool {
	var mask [16]uint64
	if len(cpus) == 0 {
		for c := range min(1024, 64*len(mask)) {
			mask[c/64] |= 1 << (c % 64)
		}
	}
	for _, c := range cpus {
		mask[c/64] |= 1 << (c % 64)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return false
	}
	ok := true
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		_, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, uintptr(tid), unsafe.Sizeof(mask), uintptr(unsafe.Pointer(&mask)))
		if errno != 0 && errno != syscall.ESRCH {
			ok = false
		}
	}
	return ok
}
