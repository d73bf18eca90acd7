package ring

import "sync/atomic"

// Published holds the ring that lookups should use now. Readers Load it on
// every lookup with one atomic load, no lock and no copy; a writer builds a
// new Ring and Publishes it. Rings are immutable, so a reader that loaded
// the old ring finishes its lookup on it safely. The zero value is ready to
// use and holds no ring.
type Published struct {
	p atomic.Pointer[Ring]
}

// Load returns the last published ring, or nil before the first Publish.
func (p *Published) Load() *Ring { return p.p.Load() }

// Publish makes r the ring that Load returns. Publishing nil withdraws the
// ring.
func (p *Published) Publish(r *Ring) { p.p.Store(r) }
