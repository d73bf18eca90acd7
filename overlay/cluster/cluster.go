package cluster

import (
	"math/rand/v2"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
)

// Size is R: a key's home cluster is the first Size distinct supernodes on
// the ring at hash(key).
const Size = 3

// WeightUnit is the capacity, in attached peers, of one unit of ring weight:
// a supernode of capacity c has weight max(1, round(c / WeightUnit)), capped
// at MaxWeight, so points scale with capacity without a big supernode costing
// thousands of points.
const (
	WeightUnit = 100
	MaxWeight  = 64
)

// MaxCapacity is the ceiling on an announced capacity, in attached peers,
// wherever capacity orders supernodes: ring weight (Weight), the spare
// capacity that weights a client's failover order and a supernode's BUSY
// alternatives (Spare), and the spare capacity --role auto reasons about.
// It is the capacity of the heaviest ring member, MaxWeight × WeightUnit:
// an announcement may claim 4,000,000,000, which would otherwise make one
// made-up supernode outweigh every honest one in every weighted choice.
// Verified mega-supernodes are exempt: their capacity is signed by an
// operator.
const MaxCapacity = MaxWeight * WeightUnit

// Capacity is e's announced capacity as every ordering counts it: at most
// MaxCapacity unless e is a verified mega-supernode.
func Capacity(e directory.Entry) int {
	if e.Cert != nil {
		return int(e.Capacity)
	}
	return min(int(e.Capacity), MaxCapacity)
}

// Spare is e's spare capacity as every ordering counts it: Capacity(e)
// less its announced load, at least 0.
func Spare(e directory.Entry) int { return max(Capacity(e)-int(e.Load), 0) }

// Weight maps an announced capacity to a ring weight.
func Weight(capacity uint32) int {
	w := (int(capacity) + WeightUnit/2) / WeightUnit
	return min(max(w, 1), MaxWeight)
}

// Home returns the home cluster of key on r, in ring order: the first Size
// distinct members at hash(key). A peer's key is its ID's binary form,
// []byte(id). It returns nil for a nil ring.
func Home(r *ring.Ring, key []byte) []peer.ID {
	return homeOf(r, key, "")
}

// HomeWithout is key's home cluster on r as if member self were not on the
// ring: the first Size distinct members at hash(key) other than self.
// Removing a member from a consistent-hash ring leaves the order of the
// others unchanged, so this is the home a supernode would have as an
// ordinary node.
func HomeWithout(r *ring.Ring, key []byte, self peer.ID) []peer.ID {
	return homeOf(r, key, self)
}

func homeOf(r *ring.Ring, key []byte, skip peer.ID) []peer.ID {
	if r == nil {
		return nil
	}
	n := Size
	if skip != "" {
		n++
	}
	out := make([]peer.ID, 0, Size)
	for _, s := range r.LookupN(key, n, nil) {
		if p, err := peer.Decode(s); err == nil && p != skip && len(out) < Size {
			out = append(out, p)
		}
	}
	return out
}

// Sample chooses up to k of the indices of spare at random, weighted by
// spare[i] (entries of 0 or less are never chosen), without replacement, in
// the order drawn. Refused clients follow this choice, so that they spread
// over the supernodes with room in proportion to that room instead of all
// going to the emptiest one. spare is not modified.
func Sample(spare []int, k int, rng *rand.Rand) []int {
	total := 0
	for _, s := range spare {
		total += max(s, 0)
	}
	if total == 0 || k <= 0 {
		return nil
	}
	left := make([]int, len(spare))
	for i, s := range spare {
		left[i] = max(s, 0)
	}
	out := make([]int, 0, min(k, len(spare)))
	for len(out) < k && total > 0 {
		x := rng.IntN(total)
		for i, s := range left {
			if x < s {
				out = append(out, i)
				total -= s
				left[i] = 0
				break
			}
			x -= s
		}
	}
	return out
}

// GroupHome returns the home of group on r: the ring owner of its name,
// which numbers its messages. Supernodes send it publishes and accept
// group messages only from it; members believe only its stamp.
func GroupHome(r *ring.Ring, group string) (peer.ID, bool) {
	if r == nil {
		return "", false
	}
	p, err := peer.Decode(r.Lookup([]byte(group)))
	return p, err == nil
}
