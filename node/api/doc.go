// Package api is the server side of the node's local control API: every
// route in one place (Handler; the tunnel routes in tunnels.go), the
// mapping of the client side's and the tunnels' errors to HTTP statuses,
// and the answers of the read-only routes built from the node's parts
// (Status from a State, Peers, Supernodes, Ring). The request and
// response types, the listener, the token and the typed client are
// package node/localapi's.
//
// It is given what it serves in Config (the client side, the tunnel
// manager, a Pinger, an Operator and the status functions), never the
// node: it must not import package node, start goroutines or listen; the
// node owns the HTTP server and its listener.
package api
