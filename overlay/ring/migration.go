package ring

import (
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// Migration routes keys across a change of ring, moving a stable percentage
// of keys to the new ring so that caches warm gradually and the change can
// be rolled back. Which keys move is fixed by each key's hash, as specified
// in the package documentation: raising the percentage only moves keys from
// old to new, lowering it only moves them back. A Migration is immutable;
// build another to change the percentage.
type Migration struct {
	old, new  *Ring
	percent   int
	threshold uint64
}

// NewMigration returns a migration from old to new with percent in [0, 100]
// of keys on new: 0 routes exactly as old, 100 exactly as new.
func NewMigration(old, new *Ring, percent int) (*Migration, error) {
	if old == nil || new == nil {
		return nil, fmt.Errorf("ring: new migration: %w (old %t, new %t)", ErrNilRing, old == nil, new == nil)
	}
	if percent < 0 || percent > 100 {
		return nil, fmt.Errorf("ring: new migration: %w: %d, want 0..100", ErrBadPercent, percent)
	}
	return &Migration{old: old, new: new, percent: percent, threshold: migrateThreshold(percent)}, nil
}

// Old returns the ring keys migrate from.
func (m *Migration) Old() *Ring { return m.old }

// New returns the ring keys migrate to.
func (m *Migration) New() *Ring { return m.new }

// Percent returns the percentage of keys routed by the new ring.
func (m *Migration) Percent() int { return m.percent }

func (m *Migration) useNew(digest uint64) bool {
	return digest>>32 < m.threshold
}

// UsesNew reports whether key is routed by the new ring.
func (m *Migration) UsesNew(key []byte) bool {
	return m.useNew(xxhash.Sum64(key))
}

// Lookup returns key's owner on the ring that routes it. The key is hashed
// once; it does not allocate.
func (m *Migration) Lookup(key []byte) string {
	d := xxhash.Sum64(key)
	if m.useNew(d) {
		return m.new.lookupHash(uint32(d))
	}
	return m.old.lookupHash(uint32(d))
}

// LookupN is Ring.LookupN on the ring that routes key.
func (m *Migration) LookupN(key []byte, n int, dst []string) []string {
	d := xxhash.Sum64(key)
	if m.useNew(d) {
		return m.new.lookupNHash(uint32(d), n, dst)
	}
	return m.old.lookupNHash(uint32(d), n, dst)
}
