// Package node is the overlayd daemon: the composition root that assembles
// one peer from the packages below it. It turns a Config into a libp2p host
// (host.go: identity, listeners, resource manager and connection manager
// sized for the role), runs the supernode directory over GossipSub and the
// ring built from it, package node/dirdriver (wired in directory.go: the
// topic, announcements, expiry, the supernode mesh, confirmations, ring
// rebuilds), or on a pinned ordinary node the partial view of the
// directory, package node/viewclient (wired in view.go, which also answers
// other nodes' view requests as hints), and plays the role:
//
//   - the client side, package node/client, on ordinary and --role auto
//     nodes (node.go builds it; Node.Client exposes it);
//   - the supernode side, package supernode, on --role supernode and on a
//     promoted auto node (supernode.go);
//   - the --role auto driver (role_run.go) over the pure rules of package
//     node/role;
//   - mega-supernode and supernode certificates and revocations,
//     package node/trust (trust.go gives it the supernode role to change
//     and hands clients back after a demotion);
//   - finding a network on the local network by mDNS, package node/lan
//     (host.go gives it the host and the node's config);
//   - reachability (reach.go) and circuit relay v2, package node/circuit:
//     the relay service on supernodes and the client's reservation that
//     follows its session (wired in circuit.go), and ping through the
//     relay (circuit_ping.go).
//
// Its data dir (the identity key, the joined groups) is package
// node/datadir's (the node and the CLI call it directly); groupstate.go
// the loop that saves the groups.
//
// It also serves the local control API (api.go holds every route; the
// types and client are in node/localapi; status.go builds the answers) and
// Prometheus metrics (metrics.go).
//
// A Node is built with New (no I/O), started with Start, and stopped with
// Close; Run does all three around a context. Node owns every goroutine it
// starts and Close waits for them. cmd/overlayd is a thin layer that turns
// flags, environment and the config file into a Config.
package node
