// Package overlay holds no code: its subpackages are what the roles share,
// chiefly the rules that both sides of a protocol (the client, node/client,
// and the supernode, package supernode) must apply identically, so that each
// lives once, below both:
//
//   - overlay/directory: the live set of supernodes, built from signed
//     announcements (Directory, Snapshot, Entry), with the acceptance rules
//     of package protocol.
//   - overlay/ring: the weighted consistent-hash ring (Ring) that maps a key
//     to the supernode that owns it; its construction is part of the wire
//     contract.
//   - overlay/cluster: the home-cluster rules: the cluster size (Size), how
//     an announced capacity becomes ring weight (Weight), which directory
//     entries are ring members (Members: regular supernodes only), a key's
//     home cluster (Home, and HomeWithout for a supernode asking as if it
//     were an ordinary node), and the spare-capacity-weighted choice of
//     supernodes that spreads refused clients (Sample).
//   - overlay/dedup: the bounded window of recently seen message keys
//     (Window) with which a client drops duplicate deliveries and a
//     supernode recognises a sender's retry.
//   - overlay/backoff: the client's retry policy (Backoff, Stagger):
//     exponential backoff with full jitter that honours a supernode's
//     retry-after hint without re-synchronising the refused clients.
//
// These packages import nothing of overlayd but protocol and each other, and
// of go-libp2p only its core interfaces. They are pure: they start no
// goroutines, never read the clock (the time is an argument) and take their
// randomness as an argument, so both sides, and tests, drive them with their
// own clock and seed.
package overlay
