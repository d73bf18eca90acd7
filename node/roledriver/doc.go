// Package roledriver is the driver of --role auto: one goroutine (Run)
// evaluates the pure rules of package node/role on every directory change
// and on a ticker, and carries out each promotion and demotion, so they
// never overlap. A promotion opens admission and switches the supernode
// role on; a demotion closes admission, announces a capacity that shrinks
// with the load, hands the clients to other supernodes over the drain
// period (Drain, which a demoted mega-supernode's hand-back uses too), and
// only then retires the role with a departure announcement. The driver
// keeps what the status shows of it (State, ChangedAt).
//
// It is given what it needs in Config: values, the directory and ring,
// and three narrow ports (Admission, Supernode, Announcer) the node
// implements. It must not import package node, and it decides nothing
// itself: the decisions are role.Decide's.
package roledriver
