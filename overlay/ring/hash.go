package ring

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// HashVersion identifies the hash function and point construction
// described in the package documentation. It is mixed into Version, so
// rings built by nodes running different constructions never compare equal.
const HashVersion = 1

// HashKey returns the ring hash of key: the low 32 bits of XXH64(key) with
// seed 0. It is the position a key takes on every node's ring.
func HashKey(key []byte) uint32 {
	return uint32(xxhash.Sum64(key))
}

// pointHash returns the hash of point i of the member whose ID is in
// buf[:len(buf)-4]; it writes BE32(i) into the last 4 bytes of buf.
func pointHash(buf []byte, i uint32) uint32 {
	binary.BigEndian.PutUint32(buf[len(buf)-4:], i)
	return uint32(xxhash.Sum64(buf))
}

// migrateThreshold returns floor(percent × 2³² / 100): a key moves to the
// new ring when the high half of its digest is below it.
func migrateThreshold(percent int) uint64 {
	return uint64(percent) << 32 / 100
}
