// Package protocol is overlayd's wire contract: protocol and topic IDs, the
// protobuf messages in package pb, their size limits, and the rules a
// receiver applies before it trusts a message. It has no goroutines, no host
// and no logs; every peer, whatever its role, speaks exactly this.
//
// # Versions
//
// Version is the overlayd protocol version carried in announcements. Stream
// protocol IDs carry their own semantic version (/overlayd/<name>/<x.y.z>);
// an incompatible change bumps the major version and the ID.
//
// # Supernode directory
//
// Supernodes publish an [pb.Announcement] on the GossipSub topic
// [DirectoryTopic] every announce interval (default 10 s) and once more with
// departing set when they stop serving. The GossipSub router runs with
// message signing and strict signature verification, so every message names
// its signer. A receiver accepts an announcement only if all of these hold
// (the reason it counts otherwise is in brackets):
//
//   - the message is at most [MaxAnnouncementSize] bytes [oversize];
//   - it decodes as a pb.Announcement [undecodable];
//   - peer_id decodes, role is supernode or mega, capacity >= 1, at least one
//     and at most [MaxAnnouncedAddrs] addresses that each decode as a
//     multiaddr, interval_ms within [MinAnnounceInterval, MaxAnnounceInterval],
//     seq > 0 [invalid];
//   - peer_id equals the GossipSub signer [signer_mismatch];
//   - seq is greater than the last seq accepted from that peer [stale_seq].
//
// An accepted entry expires [MissedAnnouncements] announce intervals (the
// announcer's interval_ms) after the last accepted announcement, and is
// removed at once by a departing one. Seq starts from the announcer's wall
// clock in nanoseconds so that it keeps increasing across restarts.
package protocol
