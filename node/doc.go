// Package node is the overlayd daemon: the composition root that builds
// one peer from the packages below it and owns their lifecycle. New checks
// a Config (package node/config) and does no I/O; Start builds and starts
// the parts in order; Close stops them and waits for every goroutine the
// node started; Run does all three around a context.
//
// What it assembles, and the file that wires each part:
//
//   - the libp2p host, node/host (node.go); LAN discovery, node/lan;
//   - the directory and ring driver, node/dirdriver (directory.go), or on
//     a pinned ordinary node the partial view, node/viewclient (view.go,
//     which also answers view requests as hints);
//   - the client side, node/client (node.go), on ordinary and auto nodes;
//   - the supernode side, package supernode (supernode.go), on pinned
//     supernodes and promoted auto nodes; the --role auto driver,
//     node/roledriver over the rules of node/role (autorole.go);
//   - operator trust, node/trust (trust.go: the supernode role the
//     certificates change, the hand-back after a demotion);
//   - reachability, circuit relay v2 and ping, node/circuit (circuit.go:
//     the locate protocol beside the relay service, Locate);
//   - tunnels, node/tunnel (tunnel.go); the data dir, node/datadir
//     (groupstate.go saves the joined groups);
//   - the local API, node/api over node/localapi (api.go), and Prometheus
//     metrics (metrics.go).
//
// Each part gets what it needs at construction, values or a narrow port
// the node implements, never *Node. The node holds no rule of its own: a
// decision belongs in the part that owns it.
package node
