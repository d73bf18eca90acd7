// Package overlay holds what every role shares: the supernode directory
// (overlay/directory), the cluster ring (overlay/ring) and the client retry
// policy (overlay/backoff). Its packages depend only on protocol and
// go-libp2p's core interfaces; they start no goroutines of their own and take
// the time as an argument.
package overlay
