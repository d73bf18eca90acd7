package supernode

import (
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/cluster"
)

// Bounds of the records other supernodes make this one keep: presence
// records (presence.go), group memberships and home groups (groups.go).
// Any directory supernode may send records, and a supernode may speak for
// its own sessions only, but it decides how many sessions it claims: without
// a bound, 500,000 forged presence records took a supernode from 37 MB to
// 161 MB. Past a bound new records are refused and counted; records already
// held are never displaced, and expired ones are still removed, so a flood
// costs the flooder its share and nobody else's. Records of this
// supernode's own clients are always kept: they are bounded by its own
// attached-peers capacity.
const (
	// presencePerSlot is how many presence records a supernode keeps per
	// slot of its own attached-peers capacity. Each client has
	// cluster.Size (R = 3) records, on its home cluster; the ring weighs
	// supernodes by capacity, so at full load a supernode holds about R ×
	// its capacity records. 4 × R leaves room for an unbalanced ring and
	// for supernodes larger than this one.
	presencePerSlot = 4 * cluster.Size
	// minPresence is the floor of the presence bound, for supernodes of
	// small capacity in a network of large ones: 16,384 records, ~2 MiB.
	minPresence = 16384
	// membershipsPerSlot and minMemberships bound the memberships this
	// supernode keeps as a group home: a client's memberships land on one
	// home each, so 16 groups per attached client of this capacity, at
	// least 65,536 (~10 MiB).
	membershipsPerSlot = 16
	minMemberships     = 65536
	// originShareDiv: one other supernode may hold at most 1/2 of a bound,
	// so one flooder leaves the other half to everyone else.
	originShareDiv = 2
)

// recordBounds are the bounds a Router enforces, fixed at construction.
type recordBounds struct {
	presence, presencePerOrigin       int
	memberships, membershipsPerOrigin int
	// homeGroups bounds the groups this supernode is home to: a group
	// needs a member or a publish to exist, and a publish to a new name
	// creates one, so it has the memberships bound.
	homeGroups int
}

func newRecordBounds(capacity, maxPresence, maxMemberships int) recordBounds {
	if maxPresence <= 0 {
		maxPresence = max(minPresence, presencePerSlot*capacity)
	}
	if maxMemberships <= 0 {
		maxMemberships = max(minMemberships, membershipsPerSlot*capacity)
	}
	return recordBounds{
		presence: maxPresence, presencePerOrigin: max(1, maxPresence/originShareDiv),
		memberships: maxMemberships, membershipsPerOrigin: max(1, maxMemberships/originShareDiv),
		homeGroups: maxMemberships,
	}
}

// originCounts counts records by the supernode that sent them.
type originCounts struct {
	total int
	by    map[peer.ID]int
}

func newOriginCounts() *originCounts { return &originCounts{by: map[peer.ID]int{}} }

func (c *originCounts) add(sn peer.ID) {
	if c == nil {
		return
	}
	c.total++
	c.by[sn]++
}

func (c *originCounts) remove(sn peer.ID) {
	if c == nil {
		return
	}
	c.total--
	if c.by[sn]--; c.by[sn] <= 0 {
		delete(c.by, sn)
	}
}

// room reports whether a new record from sn would exceed total (full) or
// sn's share perOrigin (originFull).
func (c *originCounts) room(sn peer.ID, total, perOrigin int) (full, originFull bool) {
	return c.total >= total, c.by[sn] >= perOrigin
}
