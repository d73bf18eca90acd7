// Package dirdriver drives a node's supernode directory over GossipSub:
// the I/O around the pure state machine of overlay/directory, and the ring
// built from it. The name says what it is beside that package: overlay/directory
// decides (admission, expiry, limits, snapshots), and this package is its
// driver (the topic, the timers, the dials), the way a raft RawNode has
// a thin driver; a newcomer looking for "who feeds the directory, who
// announces, who rebuilds the ring" opens it here.
//
// A Driver
//
//   - starts the node's GossipSub router (Join; gossipParams and
//     scoreParams fit it to the overlay's star topology) and, on a node
//     that hears the announcement topic (protocol.DirectoryTopic), joins
//     it with an inline validator that charges the rate limits and applies
//     each announcement to the directory, so only accepted ones propagate;
//   - announces this node while it plays the supernode role (Serve: the
//     announce loop on its schedule, and the mesh loop that keeps the
//     supernode tier a full mesh), and once more when it leaves
//     (AnnounceDeparture);
//   - expires entries whose supernodes stopped announcing, keeps the
//     directory's limits at the tier's announce interval, and keeps the
//     node connected to its bootstrap peers (Run);
//   - confirms announced supernodes (a connection at an announced address
//     whose identify lists the attach protocol; confirm.go) and, while the
//     node serves in an open network, keeps unconfirmed ones off its ring;
//   - rebuilds the ring from the directory, debounced, and publishes it
//     (ring.go; PublishRing is also the view client's way to publish the
//     ring of a partial view).
//
// What it must not do: import node or supernode. It is given the host,
// the directory, the published ring, the clock, the seed source, the
// logger and its metrics (NewMetrics, on the node's registry) in Config,
// and reaches the rest of the node through small ports: the supernode's
// announcer (Announcer), its load, whether it serves, and a hook called
// after every ring published (the supernode router drops the groups it is
// no longer home to). The metrics and log lines are the ones the node had
// (overlayd_directory_announcements_*, overlayd_ring_*), logged through the
// node's logger.
//
// New does no I/O and starts nothing. Join starts GossipSub (its router's
// goroutines end with Join's context); Run is the driver's goroutine for
// what every node does, and Serve the one for what a serving supernode
// does, each owned by the caller and ended by its context; both wait for
// the goroutines they start.
package dirdriver
