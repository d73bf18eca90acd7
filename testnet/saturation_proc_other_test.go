//go:build !linux

package testnet

// satPin is a no-op where there is no sched_setaffinity.
func satPin([]int) bool { return false }
