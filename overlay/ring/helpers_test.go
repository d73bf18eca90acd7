package ring_test

import (
	"math/rand/v2"
	"testing"

	"github.com/overlayd/overlayd/overlay/ring"
)

const base58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"

// newRand returns a deterministic source for seed; tests use no other.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x6f7665726c617964)) }

// peerID returns a string shaped like an Ed25519 libp2p peer ID.
func peerID(rng *rand.Rand) string {
	b := []byte("12D3KooW")
	for range 44 {
		b = append(b, base58[rng.IntN(len(base58))])
	}
	return string(b)
}

// members returns n members with peer-ID-like IDs and weight 1.
func members(tb testing.TB, seed uint64, n int) []ring.Member {
	tb.Helper()
	rng := newRand(seed)
	ms := make([]ring.Member, n)
	for i := range ms {
		ms[i] = ring.Member{ID: peerID(rng), Weight: 1}
	}
	return ms
}

func mustNew(tb testing.TB, ms []ring.Member, opts ...ring.Option) *ring.Ring {
	tb.Helper()
	r, err := ring.New(ms, opts...)
	if err != nil {
		tb.Fatalf("ring.New(%d members): %v", len(ms), err)
	}
	return r
}

// keys returns n random keys of size bytes, sharing one backing array.
func keys(tb testing.TB, seed uint64, n, size int) [][]byte {
	tb.Helper()
	rng := newRand(seed)
	buf := make([]byte, n*size)
	for i := 0; i+8 <= len(buf); i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			buf[i+j] = byte(v >> (8 * j))
		}
	}
	ks := make([][]byte, n)
	for i := range ks {
		ks[i] = buf[i*size : (i+1)*size : (i+1)*size]
	}
	return ks
}

func ids(ms []ring.Member) map[string]bool {
	set := make(map[string]bool, len(ms))
	for _, m := range ms {
		set[m.ID] = true
	}
	return set
}
