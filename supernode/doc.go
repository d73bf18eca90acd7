// Package supernode is the supernode side of overlayd's protocols: what a
// peer does when it carries the network for others. Its counterpart is the
// client (node/client); the two never import each other, and the rules both
// must agree on live below them in overlay/cluster and overlay/dedup. The
// wire behaviour is specified in package protocol; this package implements
// the supernode's half of it.
//
//   - [Announcer] builds the supernode's directory announcements, with
//     sequence numbers that keep increasing across restarts.
//   - [Admission] serves the attach protocol: it admits clients up to the
//     attached-peers semaphore, refuses before it allocates anything for the
//     peer (BUSY with a retry-after and spare-capacity-weighted alternatives,
//     or REDIRECT while it is not admitting), keeps sessions alive, and ends
//     them with a Detach ([Admission.Drain], [Admission.Close]). Every frame
//     to a client goes through that client's bounded fanout.Outbox
//     ([OutboxLimit] frames, a Gap notice on overflow).
//   - [Router] is messaging: it keeps the presence records of the clients
//     whose home cluster includes it, routes direct messages supernode to
//     supernode with acks and nacks, answers lookups, stores direct
//     messages for offline recipients of its home cluster, and is the
//     shell of the group core (package group): it checks the form of
//     group frames, feeds the core events under its lock with the time,
//     and carries out what the core decides (frames on the links, the
//     local fanout, the store's replay log). It serves the relay and
//     lookup protocols; [Router.Locate] backs the locate protocol, which
//     package node serves.
//   - Subpackages: group (the group path as a pure state machine: home
//     records, numbering, replication, sync, replay, held resumes), capacity
//     (the fail-fast semaphores that every expensive resource is taken
//     from), fanout (the local fanout engine and the Outbox) and store (the
//     on-disk store of replay logs and offline messages).
//
// No peer is served at the pace of a slow one: every queue fed by the
// network is bounded (a client's outbox, a link's queue of frames to one
// supernode, the fanout engine's jobs), written by a goroutine of its own,
// and drops, counting, when full.
//
// Constructors do no I/O and start nothing. [Admission.Start] and
// [Router.Start] register the stream handlers; the Router's refresh loop and
// its per-peer link writers are goroutines it owns, and Close (idempotent)
// stops them and waits for them, as [Admission.Close] does for the session
// goroutines. The wall clock is read only through the Now function of
// [AdmissionConfig] and [RouterConfig] (package node passes its own; time.Now
// only when none is given), and randomness comes from AdmissionConfig.Rand.
// Timers are not injected: the refresh ticker, the links' idle timers and
// the dial and lookup timeouts run on real time.
package supernode
