package sim

import (
	"encoding/binary"

	"github.com/libp2p/go-libp2p/core/peer"
)

// idPrefix is how an Ed25519 peer ID begins: an identity multihash (0x00)
// of 36 bytes (0x24) holding the protobuf public key (type Ed25519: 0x08
// 0x01; data of 32 bytes: 0x12 0x20).
var idPrefix = [6]byte{0x00, 0x24, 0x08, 0x01, 0x12, 0x20}

// makeID returns a peer ID of the Ed25519 form whose key bytes are drawn
// from (seed, kind, i): the same bytes, length and hash distribution on
// the ring as a real peer's, without generating a key pair. Clients' IDs
// are made when needed and not kept (a million of them would take 54 MB).
func makeID(seed uint64, kind byte, i uint64) peer.ID {
	var b [38]byte
	copy(b[:], idPrefix[:])
	x := seed ^ uint64(kind)<<56 ^ i*0x9e3779b97f4a7c15
	for k := range 4 {
		x = splitmix(x)
		binary.LittleEndian.PutUint64(b[6+8*k:], x)
	}
	return peer.ID(b[:])
}

// splitmix is SplitMix64's step.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	z := x
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

const (
	kindClient    = 'c'
	kindSupernode = 's'
)
