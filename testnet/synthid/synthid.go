// Package synthid makes the peer IDs of the testnet's models
// (testnet/sim, testnet/dircost): IDs of the Ed25519 form whose key bytes
// are drawn from a seed, with the same bytes, length and hash
// distribution on the ring as a real peer's, made without generating a
// key pair. A model of a million clients makes each client's ID when it
// needs it instead of keeping it (a million would take 54 MB), and two
// models given the same seed place the same clients on the same ring.
package synthid

import (
	"encoding/binary"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Kinds of node; the kind is part of what an ID is drawn from, so client
// i and supernode i get different IDs.
const (
	Client    = 'c'
	Supernode = 's'
)

// prefix is how an Ed25519 peer ID begins: an identity multihash (0x00)
// of 36 bytes (0x24) holding the protobuf public key (type Ed25519: 0x08
// 0x01; data of 32 bytes: 0x12 0x20).
var prefix = [6]byte{0x00, 0x24, 0x08, 0x01, 0x12, 0x20}

// ID returns the peer ID of node i of the given kind under seed.
func ID(seed uint64, kind byte, i uint64) peer.ID {
	var b [38]byte
	copy(b[:], prefix[:])
	x := seed ^ uint64(kind)<<56 ^ i*0x9e3779b97f4a7c15
	for k := range 4 {
		x = Mix(x)
		binary.LittleEndian.PutUint64(b[6+8*k:], x)
	}
	return peer.ID(b[:])
}

// Mix is SplitMix64's step, the hash IDs are drawn with; the models also
// use it as a seeded hash (of a link, say) where a generator would be
// state to carry.
func Mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	z := x
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
