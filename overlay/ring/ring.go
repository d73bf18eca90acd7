package ring

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/bits"
	"slices"
)

const (
	// DefaultPointsPerWeight is the number of points per unit of weight
	// unless WithPointsPerWeight says otherwise: 160, as in NGINX and
	// pingora-ketama, gives shares within about 8% of fair at 100 members.
	DefaultPointsPerWeight = 160
	// MaxMembers is the largest member count: a point names its member
	// with a 16-bit index.
	MaxMembers = 1 << 16
	// MaxPoints bounds the points of a ring, and so of any one member and
	// the points-per-weight setting: 2²⁶ points take 384 MiB.
	MaxPoints = 1 << 26
)

// Member is one node on the ring.
type Member struct {
	ID     string // a peer ID's string form
	Weight int    // relative capacity, >= 1
}

// Option configures New.
type Option func(*config) error

type config struct {
	pointsPerWeight int
}

// WithPointsPerWeight sets the points each unit of weight gets, n in
// [1, MaxPoints]. Every node must use the same value for the same ring.
func WithPointsPerWeight(n int) Option {
	return func(c *config) error {
		if n < 1 || n > MaxPoints {
			return fmt.Errorf("WithPointsPerWeight(%d): %w: want 1..%d", n, ErrBadPointsPerWeight, MaxPoints)
		}
		c.pointsPerWeight = n
		return nil
	}
}

// Ring is an immutable weighted consistent-hash ring. Its methods are safe
// for concurrent use.
type Ring struct {
	// hashes holds every point's hash in ring order; owners[i] is the
	// index in members of the member that point i belongs to. Past
	// len(hashes), its capacity holds 2*half-1 copies of 0xffffffff, so
	// that find's fixed-length search never reads past the allocation.
	hashes []uint32
	owners []uint16
	// index[b] is the first i with hashes[i]>>shift == b or later, for
	// b in [0, 2^(32-shift)]; the last entry is len(hashes). shift < 32.
	index []uint32
	shift uint8
	// half is the first step of find's search: no bucket holds more than
	// 2*half-1 points.
	half uint32

	members         []Member // sorted by ID
	pointsPerWeight int
	collisions      int
	version         string
}

// New builds a ring of members. Member order does not matter: the same set
// gives the same ring on every node. New copies members.
func New(members []Member, opts ...Option) (*Ring, error) {
	cfg := config{pointsPerWeight: DefaultPointsPerWeight}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, fmt.Errorf("ring: new: %w", err)
		}
	}
	sorted, total, err := validate(members, cfg.pointsPerWeight)
	if err != nil {
		return nil, fmt.Errorf("ring: new: %w", err)
	}

	r := &Ring{
		members:         sorted,
		pointsPerWeight: cfg.pointsPerWeight,
		version:         version(sorted, cfg.pointsPerWeight),
	}
	r.hashes, r.owners = points(sorted, cfg.pointsPerWeight, total)
	for i := 1; i < len(r.hashes); i++ {
		if r.hashes[i] == r.hashes[i-1] {
			r.collisions++
		}
	}
	r.index, r.shift, r.half, r.hashes = buildIndex(r.hashes)
	return r, nil
}

// validate checks members and returns a copy sorted by ID and the ring's
// total number of points.
func validate(members []Member, ppw int) ([]Member, int, error) {
	if len(members) == 0 {
		return nil, 0, ErrNoMembers
	}
	if len(members) > MaxMembers {
		return nil, 0, fmt.Errorf("%w: %d members, at most %d", ErrTooManyMembers, len(members), MaxMembers)
	}
	total := 0
	for i, m := range members {
		if m.ID == "" {
			return nil, 0, fmt.Errorf("%w: members[%d]", ErrEmptyID, i)
		}
		if m.Weight < 1 {
			return nil, 0, fmt.Errorf("%w: members[%d] %q has weight %d", ErrBadWeight, i, m.ID, m.Weight)
		}
		if m.Weight > MaxPoints/ppw {
			return nil, 0, fmt.Errorf("%w: members[%d] %q: weight %d × %d points per weight exceeds %d",
				ErrTooManyPoints, i, m.ID, m.Weight, ppw, MaxPoints)
		}
		total += m.Weight * ppw // both terms <= MaxPoints: no overflow
		if total > MaxPoints {
			return nil, 0, fmt.Errorf("%w: members[:%d] need %d points, at most %d", ErrTooManyPoints, i+1, total, MaxPoints)
		}
	}

	order := make([]int, len(members))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(members[a].ID, members[b].ID), cmp.Compare(a, b))
	})
	sorted := make([]Member, len(members))
	for i, o := range order {
		sorted[i] = members[o]
		if i > 0 && sorted[i].ID == sorted[i-1].ID {
			return nil, 0, fmt.Errorf("%w: members[%d] and members[%d] are both %q", ErrDuplicateID, order[i-1], o, sorted[i].ID)
		}
	}
	return sorted, total, nil
}

// points returns every point's hash and member index in ring order: sorted
// by hash, ties in generation order, which is member ID then point index.
func points(members []Member, ppw, total int) ([]uint32, []uint16) {
	hashes := make([]uint32, total, total+min(padGuess, total/32))
	owners := make([]uint16, total)
	maxID := 0
	for _, m := range members {
		maxID = max(maxID, len(m.ID))
	}
	buf := make([]byte, 0, maxID+4)
	p := 0
	for mi, m := range members {
		buf = append(append(buf[:0], m.ID...), 0, 0, 0, 0)
		for i := range m.Weight * ppw {
			hashes[p] = pointHash(buf, uint32(i))
			owners[p] = uint16(mi)
			p++
		}
	}
	radixSort(hashes, owners)
	return hashes, owners
}

// radixSort sorts hashes ascending, moving owners along with them. It is
// stable: equal hashes keep their relative order.
func radixSort(hashes []uint32, owners []uint16) {
	if len(hashes) < 2 {
		return
	}
	srcH, srcO := hashes, owners
	dstH, dstO := make([]uint32, len(hashes)), make([]uint16, len(owners))
	var count [256]int
	for shift := 0; shift < 32; shift += 8 {
		clear(count[:])
		for _, h := range srcH {
			count[byte(h>>shift)]++
		}
		sum := 0
		for i, c := range count {
			count[i] = sum
			sum += c
		}
		for i, h := range srcH {
			d := &count[byte(h>>shift)]
			dstH[*d], dstO[*d] = h, srcO[i]
			*d++
		}
		srcH, dstH = dstH, srcH
		srcO, dstO = dstO, srcO
	}
	// Four passes: the sorted data is back in hashes and owners.
}

// padGuess is the padding points allocates after the hashes of a ring of
// 1000 points or more: enough for buckets of up to 16 points, which covers
// 2048 × 160 points and less in practice. buildIndex reallocates if the
// largest bucket needs more.
const padGuess = 31

// buildIndex returns the lookup table over hashes, its shift and the first
// search step, and hashes padded for the search. The table has 2^k + 1
// entries of 4 bytes with 2^k <= 3n/8 (or 2, for rings of under 8 points),
// so it adds at most 1.5 bytes per point, and buckets hold 8/3 to 16/3
// points on average.
func buildIndex(hashes []uint32) ([]uint32, uint8, uint32, []uint32) {
	n := len(hashes)
	k := max(bits.Len(uint(n*3/8))-1, 1) // k >= 1: shift < 32, see find
	index, shift, largest := bucketize(hashes, k)
	half := uint32(1) << (bits.Len32(largest) - 1)
	if need := n + int(2*half-1); cap(hashes) < need {
		hashes = append(make([]uint32, 0, need), hashes...)
	}
	pad := hashes[n : n+int(2*half-1)]
	for i := range pad {
		pad[i] = math.MaxUint32
	}
	return index, shift, half, hashes[:n]
}

// bucketize returns the table for 2^k buckets and the most points in any
// bucket.
func bucketize(hashes []uint32, k int) ([]uint32, uint8, uint32) {
	shift := uint8(32 - k)
	index := make([]uint32, 1<<k+1)
	p, largest := 0, uint32(0)
	for b := range 1 << k {
		for p < len(hashes) && uint64(hashes[p])>>shift < uint64(b) {
			p++
		}
		index[b] = uint32(p)
		if b > 0 {
			largest = max(largest, index[b]-index[b-1])
		}
	}
	index[1<<k] = uint32(len(hashes))
	largest = max(largest, index[1<<k]-index[1<<k-1])
	return index, shift, largest
}

// version computes Version as documented in the package comment.
func version(sorted []Member, ppw int) string {
	size := len("overlayd/ring") + 12
	for _, m := range sorted {
		size += 12 + len(m.ID)
	}
	b := make([]byte, 0, size)
	b = append(b, "overlayd/ring"...)
	b = binary.BigEndian.AppendUint32(b, HashVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(ppw))
	b = binary.BigEndian.AppendUint32(b, uint32(len(sorted)))
	for _, m := range sorted {
		b = binary.BigEndian.AppendUint32(b, uint32(len(m.ID)))
		b = append(b, m.ID...)
		b = binary.BigEndian.AppendUint64(b, uint64(m.Weight))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// find returns the position of the point that owns ring hash h: the first
// point in h's bucket, or after it, whose hash is >= h. It counts the
// window's hashes below h with a branch-free binary search of fixed length,
// so the CPU mispredicts nothing and overlaps consecutive lookups; hashes
// past the bucket are all >= h (later buckets or padding) and so are never
// counted.
func (r *Ring) find(h uint32) int {
	base := r.index[h>>(r.shift&31)] // &31 spares the compiler's check for shifts >= 32
	hs := r.hashes[:cap(r.hashes)]
	for step := r.half; step > 0; step >>= 1 {
		// below is 1 if the probed hash is < h, else 0, computed without a
		// branch (the compiler would emit a conditional jump for an if).
		below := uint32((uint64(hs[base+step-1]) - uint64(h)) >> 63)
		base += step & -below
	}
	p := int(base)
	if p == len(r.hashes) {
		p = 0
	}
	return p
}

// Lookup returns the ID of the member that owns key. It does not allocate.
func (r *Ring) Lookup(key []byte) string {
	return r.lookupHash(HashKey(key))
}

func (r *Ring) lookupHash(h uint32) string {
	return r.members[r.owners[r.find(h)]].ID
}

// lookupNSmall is the largest n for which LookupN tracks the members it has
// seen on the stack; larger n allocate a bitmap of Len bits.
const lookupNSmall = 16

// LookupN appends to dst[:0] the IDs of the first n distinct members in
// ring order from key's owner, and returns the result: the key's cluster,
// owner first. It returns fewer than n only when the ring has fewer
// members, and none when n <= 0. It does not allocate when n <= 16 and dst
// has room for the result.
func (r *Ring) LookupN(key []byte, n int, dst []string) []string {
	return r.lookupNHash(HashKey(key), n, dst)
}

func (r *Ring) lookupNHash(h uint32, n int, dst []string) []string {
	dst = dst[:0]
	n = min(n, len(r.members))
	if n <= 0 {
		return dst
	}
	p := r.find(h)
	if n == 1 {
		return append(dst, r.members[r.owners[p]].ID)
	}
	if n > lookupNSmall {
		return r.lookupNLarge(p, n, dst)
	}
	var seenBuf [lookupNSmall]uint16
	seen := seenBuf[:0]
	owners := r.owners
	// Every member has a point, so one turn of the ring finds n of them.
	for range owners {
		o := owners[p]
		if !slices.Contains(seen, o) {
			seen = append(seen, o)
			dst = append(dst, r.members[o].ID)
			if len(seen) == n {
				break
			}
		}
		if p++; p == len(owners) {
			p = 0
		}
	}
	return dst
}

func (r *Ring) lookupNLarge(p, n int, dst []string) []string {
	seen := make([]uint64, (len(r.members)+63)/64)
	found := 0
	for range r.owners {
		o := r.owners[p]
		if seen[o/64]&(1<<(o%64)) == 0 {
			seen[o/64] |= 1 << (o % 64)
			dst = append(dst, r.members[o].ID)
			if found++; found == n {
				break
			}
		}
		if p++; p == len(r.owners) {
			p = 0
		}
	}
	return dst
}

// Members returns a copy of the ring's members sorted by ID.
func (r *Ring) Members() []Member { return slices.Clone(r.members) }

// Len returns the number of members.
func (r *Ring) Len() int { return len(r.members) }

// Points returns the number of points on the ring, collided ones included.
func (r *Ring) Points() int { return len(r.hashes) }

// PointsPerWeight returns the points each unit of weight got.
func (r *Ring) PointsPerWeight() int { return r.pointsPerWeight }

// Collisions returns how many points share their 32-bit hash with the
// point before them in ring order and so own no hash space.
func (r *Ring) Collisions() int { return r.collisions }

// Version returns a hex digest of the member set, the points setting and
// HashVersion: equal on every node that built a ring of the same set, in
// any order. See the package documentation for its exact input.
func (r *Ring) Version() string { return r.version }

// sizeBytes returns the bytes held by r's point arrays and lookup table.
func (r *Ring) sizeBytes() int {
	return 4*cap(r.hashes) + 2*cap(r.owners) + 4*cap(r.index)
}
