package capacity

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Names of the semaphores of a [Set]. They are the values of the semaphore
// label and the Resource of BUSY refusals.
const (
	// NameAttached guards peers attached to the supernode.
	NameAttached = "attached_peers"
	// NameRelays guards direct messages being relayed.
	NameRelays = "relays"
	// NameLookups guards presence lookups being served.
	NameLookups = "lookups"
	// NameFanout guards group-message fanout jobs.
	NameFanout = "fanout_jobs"
)

// Limits are the maximums of the four semaphores of a supernode. Every field
// must be in [1, [MaxSlots]].
type Limits struct {
	// AttachedPeers is the number of ordinary nodes that may be attached at
	// once; it is the capacity the supernode announces.
	AttachedPeers int `json:"attached_peers"`
	// RelaysInFlight is the number of direct messages held between being read
	// from one stream and being acknowledged by the next hop.
	RelaysInFlight int `json:"relays_in_flight"`
	// LookupsInFlight is the number of presence lookups being served, for
	// attached peers and for other supernodes.
	LookupsInFlight int `json:"lookups_in_flight"`
	// FanoutJobs is the number of group messages being fanned out at once.
	FanoutJobs int `json:"fanout_jobs"`
}

// Ratios used by [DefaultLimits], relative to the announced capacity.
const (
	// RelaysPerPeer is 4: with acknowledged delivery an attached peer normally has
	// one or two direct messages in flight in each direction; four per peer
	// absorbs bursts while bounding relay buffers to 4 x capacity frames.
	RelaysPerPeer = 4
	// LookupsPerPeer is 2: one lookup per attached peer (a re-attaching peer
	// resolves its contacts, which is the failover-storm case) plus an equal
	// share for lookups from other supernodes for keys the ring assigns here.
	LookupsPerPeer = 2
	// PeersPerFanoutJob is 8: a fanout job sends one group message to many
	// recipients and is split across workers, so it is CPU-bound and a few
	// per core keep every core busy; more only queue memory. One job per 8
	// attached peers scales with the node's class (a mega-supernode gets
	// proportionally more).
	PeersPerFanoutJob = 8
	// MinFanoutJobs is 4: it keeps small supernodes able to serve several groups at
	// once.
	MinFanoutJobs = 4
)

// DefaultLimits derives a supernode's limits from its announced capacity (the
// number of peers it attaches):
//
//	AttachedPeers   = capacity
//	RelaysInFlight  = RelaysPerPeer x capacity   (4x)
//	LookupsInFlight = LookupsPerPeer x capacity  (2x)
//	FanoutJobs      = max(MinFanoutJobs, capacity / PeersPerFanoutJob)
//
// A capacity below 1 is treated as 1; every limit saturates at [MaxSlots].
func DefaultLimits(capacity int) Limits {
	capacity = min(max(capacity, 1), MaxSlots)
	return Limits{
		AttachedPeers:   capacity,
		RelaysInFlight:  satMul(capacity, RelaysPerPeer),
		LookupsInFlight: satMul(capacity, LookupsPerPeer),
		FanoutJobs:      max(MinFanoutJobs, capacity/PeersPerFanoutJob),
	}
}

// satMul returns min(a*b, MaxSlots) for a, b in [1, MaxSlots].
func satMul(a, b int) int {
	if a > MaxSlots/b {
		return MaxSlots
	}
	return a * b
}

// Validate reports the first field outside [1, [MaxSlots]], naming it.
func (l Limits) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"AttachedPeers", l.AttachedPeers},
		{"RelaysInFlight", l.RelaysInFlight},
		{"LookupsInFlight", l.LookupsInFlight},
		{"FanoutJobs", l.FanoutJobs},
	} {
		if f.v < 1 || f.v > MaxSlots {
			return fmt.Errorf("capacity: invalid limits: %s must be in [1, %d], got %d", f.name, MaxSlots, f.v)
		}
	}
	return nil
}

// Set is the group of semaphores that protects one supernode. The fields are
// set by [NewSet] and must not be reassigned.
type Set struct {
	// Attached guards attached peers; acquire before allocating any
	// per-peer state for an attach request, release on detach.
	Attached *Semaphore
	// Relays guards direct messages in flight.
	Relays *Semaphore
	// Lookups guards presence lookups in flight.
	Lookups *Semaphore
	// Fanout guards group fanout jobs in flight.
	Fanout *Semaphore
}

// NewSet validates l and builds the four semaphores, named [NameAttached],
// [NameRelays], [NameLookups] and [NameFanout]. opts apply to all four; use
// [Semaphore.SetRetryAfter] to give one of them a different hint.
func NewSet(l Limits, opts ...Option) (*Set, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	var s Set
	for _, x := range []struct {
		dst  **Semaphore
		name string
		max  int
	}{
		{&s.Attached, NameAttached, l.AttachedPeers},
		{&s.Relays, NameRelays, l.RelaysInFlight},
		{&s.Lookups, NameLookups, l.LookupsInFlight},
		{&s.Fanout, NameFanout, l.FanoutJobs},
	} {
		sem, err := New(x.name, x.max, opts...)
		if err != nil {
			return nil, err
		}
		*x.dst = sem
	}
	return &s, nil
}

// All returns the set's semaphores in a fixed order: attached, relays,
// lookups, fanout.
func (s *Set) All() []*Semaphore {
	return []*Semaphore{s.Attached, s.Relays, s.Lookups, s.Fanout}
}

// Limits returns the current maximums.
func (s *Set) Limits() Limits {
	return Limits{
		AttachedPeers:   s.Attached.Max(),
		RelaysInFlight:  s.Relays.Max(),
		LookupsInFlight: s.Lookups.Max(),
		FanoutJobs:      s.Fanout.Max(),
	}
}

// SetLimits validates l and applies it with [Semaphore.SetMax], so lowering a
// limit evicts nobody. It is used on promotion to mega-supernode and on
// demotion. The four changes are not atomic together.
func (s *Set) SetLimits(l Limits) error {
	if err := l.Validate(); err != nil {
		return err
	}
	// SetMax cannot fail: Validate checked every value.
	_ = s.Attached.SetMax(l.AttachedPeers)
	_ = s.Relays.SetMax(l.RelaysInFlight)
	_ = s.Lookups.SetMax(l.LookupsInFlight)
	_ = s.Fanout.SetMax(l.FanoutJobs)
	return nil
}

// Register registers the set's semaphores on reg; see [Register].
func (s *Set) Register(reg prometheus.Registerer) error {
	return Register(reg, s.All()...)
}
