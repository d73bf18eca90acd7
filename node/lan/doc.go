// Package lan is zero-configuration discovery on the local network: a node
// without bootstrap peers advertises itself by multicast DNS under Service
// and browses for others (go-libp2p p2p/discovery/mdns), and dials a few of
// the peers it finds. The directory then reaches it over GossipSub on those
// connections, as it does through a bootstrap peer, and the client attaches
// to the supernodes it learns of.
//
// Dialling is bounded so that a LAN full of overlayd nodes cannot make a
// node dial storm: at most perMinute attempts in any minute, spacing apart,
// one at a time, none while want peers found by mDNS are connected, and a
// failed peer is retried only after a doubling backoff. The peers found are
// remembered, up to knownMax, because the mDNS resolver reports a peer once
// per record lifetime (an hour), not once per query. These decisions are
// the pure core in peers.go; Run is the shell that owns the mDNS service,
// the ticker and the dials.
//
// A node whose listen addresses are all loopback does not use mDNS: it has
// nothing to offer the local network (and the in-process tests and
// testnets, which listen on 127.0.0.1, stay apart from each other and from
// any other overlayd on the machine).
//
// A node alone (no bootstrap peers, no peer at all after Config.HintAfter)
// logs, once, how to join a network, and why mDNS found no one.
//
// Discovery itself is tested only between network namespaces
// (cmd/overlayd TestMDNSLANDaemonsFindEachOther): started in a test
// process, mDNS would multicast on the machine's own interfaces, and tests
// send traffic only to loopback and to namespaces they create.
package lan
