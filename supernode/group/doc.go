// Package group is the group messaging of a supernode as a pure state
// machine: the home of a group (membership records, epochs, numbering,
// replication to the home cluster and its acks, the sync a new home does
// before it numbers, replay of what a member or a supernode missed, the
// ring changes that end a home's role) and the member's side of a
// supernode (joins and leaves of its clients, the homes it told them to,
// members held while a home replays, the position it resumes from).
//
// The core is driven, in the shape of etcd's raft: every method of [Core]
// is an event (a frame from a client or another supernode, a ring change,
// a refresh, a tick) and takes the time as an argument where it needs it;
// what the core decides goes out through the ports of its [Config] (frames
// to supernodes on ordered links, frames and fanout to local clients) and
// the replay log it reads and appends to synchronously, as raft reads its
// Storage. It starts no goroutine, reads no clock, draws no randomness and
// imports nothing of libp2p: package supernode's Router is the shell that
// owns the streams, the timers and the lock, and testnet/groupsim drives
// the same core over thousands of seeded runs with faults injected.
// Signatures stay real: the core is handed a [Signer] and a [Verifier].
//
// The core is not safe for concurrent use; its owner serialises every call.
// Ports must not call back into the core.
package group
