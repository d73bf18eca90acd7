package client

import (
	"math/rand/v2"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
)

// maxPerPass bounds the supernodes one failover pass asks, so a client
// never sweeps the whole directory in one go.
const maxPerPass = 8

// plan is the pure failover order for one pass: the home cluster in ring
// order, then the supernode the client was last attached to (last; "" for
// none), then the alternatives supernodes offered, then other supernodes of
// the directory with spare capacity (in random order weighted by
// cluster.Spare, so clients do not herd onto the emptiest), then
// mega-supernodes (the fallback tier) in megaOrder. Peers that asked us to
// wait (notBefore after now) and self are skipped; no peer appears twice;
// at most maxPerPass entries.
//
// Slots are reserved, so that announcements cannot crowd out the
// supernodes the client has reason to trust: the home cluster and last
// come first, and when a mega-supernode can be asked, the pass keeps one
// slot for it: alternatives and spare-weighted supernodes fill only the
// rest. Spare capacity is what peers announce, and a made-up supernode
// can announce any.
func plan(self peer.ID, home []peer.ID, last peer.ID, alts []peer.AddrInfo, snap *directory.Snapshot,
	notBefore map[peer.ID]time.Time, now time.Time, rng *rand.Rand) []peer.AddrInfo {
	out := make([]peer.AddrInfo, 0, maxPerPass)
	seen := map[peer.ID]bool{self: true}
	skip := func(id peer.ID) bool { return seen[id] || now.Before(notBefore[id]) }
	add := func(ai peer.AddrInfo, limit int) {
		if len(out) >= limit || skip(ai.ID) {
			return
		}
		seen[ai.ID] = true
		out = append(out, ai)
	}
	for _, id := range home {
		if e, ok := snap.Get(id); ok {
			add(peer.AddrInfo{ID: id, Addrs: e.Addrs}, maxPerPass)
		}
	}
	if e, ok := snap.Get(last); ok && last != "" {
		add(peer.AddrInfo{ID: last, Addrs: e.Addrs}, maxPerPass)
	}
	var spare []directory.Entry
	var weights []int
	var megas []directory.Entry
	for _, e := range snap.Entries {
		switch {
		case skip(e.ID):
		case e.Role == protocol.RoleMega:
			megas = append(megas, e)
		case cluster.Spare(e) > 0:
			spare = append(spare, e)
			weights = append(weights, cluster.Spare(e))
		}
	}
	ais := make([]peer.AddrInfo, len(megas))
	caps := make([]uint32, len(megas))
	for i, e := range megas {
		ais[i], caps[i] = peer.AddrInfo{ID: e.ID, Addrs: e.Addrs}, e.Capacity
	}
	megaSlot := 0
	if len(megas) > 0 {
		megaSlot = 1
	}
	for _, ai := range alts {
		add(ai, maxPerPass-megaSlot)
	}
	for _, i := range cluster.Sample(weights, maxPerPass-megaSlot-len(out), rng) {
		add(peer.AddrInfo{ID: spare[i].ID, Addrs: spare[i].Addrs}, maxPerPass-megaSlot)
	}
	for _, ai := range megaOrder(self, ais, caps) {
		add(ai, maxPerPass)
	}
	return out
}

// megaOrder orders mega-supernodes for client self by a ring of the megas
// weighted by capacity, so clients falling back spread over them in
// proportion to their size instead of all picking the first. Each client's
// order is stable: it does not change between passes.
func megaOrder(self peer.ID, megas []peer.AddrInfo, caps []uint32) []peer.AddrInfo {
	if len(megas) < 2 {
		return megas
	}
	members := make([]ring.Member, len(megas))
	byID := make(map[string]peer.AddrInfo, len(megas))
	for i, m := range megas {
		members[i] = ring.Member{ID: m.ID.String(), Weight: cluster.Weight(caps[i])}
		byID[m.ID.String()] = m
	}
	r, err := ring.New(members)
	if err != nil {
		return megas
	}
	out := make([]peer.AddrInfo, 0, len(megas))
	for _, id := range r.LookupN([]byte(self), len(megas), nil) {
		out = append(out, byID[id])
	}
	return out
}

// returnTargets is the pure return-home decision: the members of the home
// cluster, in ring order, that a client attached away from home asks to
// take it back — those in the directory that announced spare capacity and
// did not ask it to wait. Empty when the client is already home (current
// is a member) or no member has room.
func returnTargets(home []peer.ID, current peer.ID, snap *directory.Snapshot,
	notBefore map[peer.ID]time.Time, now time.Time) []peer.AddrInfo {
	var out []peer.AddrInfo
	for _, id := range home {
		if id == current {
			return nil
		}
	}
	for _, id := range home {
		e, ok := snap.Get(id)
		if !ok || e.Load >= e.Capacity || now.Before(notBefore[id]) {
			continue
		}
		out = append(out, peer.AddrInfo{ID: id, Addrs: e.Addrs})
	}
	return out
}
