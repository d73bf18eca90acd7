// Package client is the ordinary node's side of the attach and messaging
// protocols: the counterpart of package supernode, the way go-libp2p's
// circuit relay has sibling relay and client packages over one wire
// contract (package protocol).
//
// A [Client] keeps its node attached to one supernode: it plans failover
// passes over the home cluster, the alternatives refused supernodes offer,
// other supernodes with spare capacity and the mega-supernodes ([plan]),
// backs off under the overlay/backoff policy between passes, keeps the
// session alive with pings, fails over when the supernode dies, detaches or
// refuses, and moves back home when a home member has room. Over the same
// session it sends direct messages (retried until acked), joins groups
// (re-joined on every new session), publishes to them, asks for their
// members, drops duplicates, and feeds local [Listener]s.
//
// The client reads the node's directory and ring through two small
// interfaces and reacts through hooks ([WithSessionHook] for the relay
// reservation, [WithObserver] for per-node events); it never imports
// package node or package supernode. The rules it shares with supernodes
// (home cluster, weights, weighted sampling) live in overlay/cluster.
//
// Lifecycle: [New] does no I/O; [Client.Run] does the work until its context
// ends and returns only when every goroutine it started has stopped.
// Messaging methods may be called from any goroutine at any time; while the
// client is not attached they fail with [ErrNotAttached].
package client
