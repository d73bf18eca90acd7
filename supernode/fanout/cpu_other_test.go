//go:build !unix

package fanout

// processCPU returns 0: the CPU time is not measured on this platform.
func processCPU() int64 { return 0 }
