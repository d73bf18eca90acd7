// Package host builds the node's libp2p host from its configuration: TCP
// and QUIC on the configured addresses only, the identity key, an
// explicit resource manager sized for the role (connections, streams,
// the attach and relay services, per-IP limits and connection rates), a
// connection manager whose watermarks sit below those limits, the
// NAT-traversal options (AutoNAT, hole punching) and the identify agent
// version.
//
// It only constructs: it starts no goroutine of its own, keeps no state
// and must not import package node; the caller owns and closes the host
// and the resource manager it returns.
package host
