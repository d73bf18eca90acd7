// Package node is the overlayd daemon: the composition root that assembles
// one peer from the packages below it. It turns a Config into a libp2p host
// (host.go: identity, listeners, resource manager and connection manager
// sized for the role), runs the supernode directory over GossipSub
// (directory.go) and the ring rebuild loop (ring.go), and plays the role:
//
//   - the client side, package node/client, on ordinary and --role auto
//     nodes (node.go builds it; Node.Client exposes it);
//   - the supernode side, package supernode, on --role supernode and on a
//     promoted auto node (supernode.go);
//   - the --role auto driver (role_run.go) over the pure rules of package
//     node/role;
//   - mega-supernode certificates and revocations (mega.go);
//   - finding a network on the local network by mDNS, package node/lan
//     (host.go gives it the host and the node's config);
//   - reachability (reach.go) and circuit relay v2, package node/circuit:
//     the relay service on supernodes and the client's reservation that
//     follows its session (wired in circuit.go), and ping through the
//     relay (circuit_ping.go).
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
