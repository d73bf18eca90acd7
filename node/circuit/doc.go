// Package circuit is overlayd's use of circuit relay v2, on both sides.
//
// On a supernode, the relay service (Relay.StartService) relays
// connections to the ordinary nodes attached to it that are not publicly
// reachable. Its resources follow the admission semaphores (LimitsFor):
// only attached clients may reserve, so reservations never exceed the
// attached-peers capacity; circuits in total are bounded by the relays
// semaphore's size (RelaysPerPeer × capacity); reservations per IP follow
// --conns-per-ip. go-libp2p's EnableRelayService waits for AutoNAT to call
// the node public, which never happens on private networks and is not the
// role's decision: the service is constructed directly when the node
// becomes a supernode. Per-peer budgets (Budgets, budget.go) bound what
// one peer gets relayed across circuits.
//
// On an ordinary node that is not publicly reachable, the reservation
// client (Relay.RunReservations, reservation.go) keeps a reservation on
// the supernode it is attached to, so that other peers reach it at
// /p2p/<supernode>/p2p-circuit/p2p/<self>.
//
// The package builds no host: it is given one (Config.Host), and the
// host is given Budgets as its bandwidth reporter when it is built.
// Reachability (AutoNAT) and the locate protocol stay with the node, which
// tells the relay what it needs through Config.Reachability, Kick and
// Attached.
package circuit
