package synthid

import "testing"

// TestIDIsAnEd25519PeerID checks the IDs decode as real Ed25519 peer IDs
// with a public key, differ by seed, kind and index, and repeat exactly.
func TestIDIsAnEd25519PeerID(t *testing.T) {
	seen := map[string]bool{}
	for _, seed := range []uint64{1, 2} {
		for _, kind := range []byte{Client, Supernode} {
			for i := range uint64(100) {
				id := ID(seed, kind, i)
				if err := id.Validate(); err != nil {
					t.Fatalf("ID(%d, %c, %d): %v", seed, kind, i, err)
				}
				if _, err := id.ExtractPublicKey(); err != nil {
					t.Fatalf("ID(%d, %c, %d) holds no public key: %v", seed, kind, i, err)
				}
				if seen[string(id)] {
					t.Fatalf("ID(%d, %c, %d) repeats another", seed, kind, i)
				}
				seen[string(id)] = true
				if ID(seed, kind, i) != id {
					t.Fatalf("ID(%d, %c, %d) differs between calls", seed, kind, i)
				}
			}
		}
	}
}
