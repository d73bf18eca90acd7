// Package ring is a weighted ketama consistent-hash ring: it maps a key to
// the member (a supernode, by peer ID) that owns it, and to the cluster of
// the next n distinct members after it.
//
// Every node computes rings on its own from the same member list, so the
// construction below is part of the wire protocol: two nodes that disagree
// on any step route the same key to different owners. HashVersion names
// this construction; change any step and HashVersion must change too.
//
// # Hash function (HashVersion 1)
//
// The ring hash of a byte string b is the low 32 bits of its 64-bit XXH64
// digest with seed 0, as specified by the xxHash project
// (https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md) and
// computed here by github.com/cespare/xxhash/v2 Sum64:
//
//	H(b) = uint32(XXH64(b, seed=0))
//
// HashKey exports H. A key is hashed once per lookup.
//
// # Points
//
// A member with identifier ID (the UTF-8 bytes of a peer ID's string form)
// and weight w gets P = w × PointsPerWeight points, PointsPerWeight being
// 160 unless set with WithPointsPerWeight. Point i, for 0 <= i < P, has the
// hash
//
//	H(ID ‖ BE32(i))
//
// where ‖ is concatenation and BE32(i) the 4-byte big-endian encoding of i.
// The fixed-width suffix makes the input unambiguous for any ID.
//
// The ring is the list of all points in ascending order of hash. Points of
// equal hash (a 32-bit collision: about n²/2³³ of them for n points, so
// ~12 at 2048 members × 160) are ordered by member ID, byte-wise ascending,
// then by point index ascending. Only the first of a run of equal points
// owns hash space; Collisions counts the others.
//
// # Lookup
//
// A key k with h = H(k) is owned by the member of the first point in ring
// order whose hash is >= h, wrapping to the first point of the ring when
// there is none. LookupN walks the ring from that point onwards, wrapping
// once, and returns the first n distinct members it meets: the owner first,
// then its successors. That list is the key's cluster.
//
// # Migration
//
// During a migration from ring Old to ring New at p percent, key k uses New
// if and only if
//
//	uint32(XXH64(k, seed=0) >> 32) < floor(p × 2³² / 100)
//
// that is, the high half of the same digest whose low half is the ring
// hash. The two halves are independent for XXH64, so the keys moved are an
// even sample of every owner's keys, each key's choice is fixed by the key
// alone, raising p only moves keys from Old to New and lowering it only
// moves them back; p = 0 is exactly Old and p = 100 exactly New.
//
// # Version
//
// Version is the lowercase hex of the first 16 bytes of SHA-256 over
//
//	"overlayd/ring" ‖ BE32(HashVersion) ‖ BE32(PointsPerWeight) ‖ BE32(m) ‖
//	for each member in ascending ID order: BE32(len(ID)) ‖ ID ‖ BE64(weight)
//
// where m is the number of members. Nodes with the same member set build
// identical rings and report the same Version, whatever order they received
// the members in.
//
// # Storage
//
// A point takes 6 bytes: its hash in one []uint32 and its member's index in
// a parallel []uint16, which also bounds a ring at MaxMembers members. A
// table indexed by the top bits of the hash, with one uint32 entry for
// every 8/3 to 16/3 points, narrows a lookup to the points of one bucket;
// it adds at most 1.5 bytes per point. Within the bucket a branch-free
// binary search of fixed length (set by the ring's largest bucket, read
// over a few padding hashes past the end) finds the owner, so lookups cost
// no branch mispredictions. All in, a ring of 100 or 2048 members at 160
// points takes 7.0 to 7.5 bytes per point; see docs/BENCHMARKS.md.
//
// A Ring is immutable and safe for concurrent use; Published hands the
// current one to readers without locks.
package ring
