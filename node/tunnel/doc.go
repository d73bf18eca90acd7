// Package tunnel carries TCP connections between peers over libp2p
// streams of protocol.TunnelID: a node exposes local services by name to
// an allow-list of peers, and a connect listener on another node carries
// each accepted connection to such a service.
//
// Each tunnel connection is one stream at a time. Its bytes travel in
// frames with offsets and cumulative acknowledgements; each side holds at
// most Config.Window unacknowledged bytes, which bounds its memory and
// makes a slow reader slow the writer end to end. Because every side keeps
// its unacknowledged bytes, the connecting side can move a connection to a
// new stream (a resume) without either TCP connection noticing: when a
// direct connection to the peer appears while the connection is relayed
// (hole punching), or when the relayed stream is cut by the relay's limits
// and a direct connection can be made. The wire protocol is specified in
// package protocol's documentation; docs/ARCHITECTURE.md ("Tunnels")
// describes the design.
//
// Streams are opened through a Dialer: HostDialer on a bare host, or
// RelayDialer, the node's, which dials a peer directly and otherwise
// through the relay of the supernode a Locator names (ErrRelayBusy when
// that relay refuses). The package is given its host, dialer, clock,
// logger and registerer; it must not import package node.
package tunnel
