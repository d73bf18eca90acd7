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
// order, then the alternatives supernodes offered, then other supernodes
// of the directory with spare capacity (in random order weighted by spare
// capacity, so clients do not herd onto the emptiest), then mega-supernodes
// (the fallback tier) in megaOrder. Peers that asked us to wait (notBefore
// after now) and self are skipped; no peer appears twice; at most
// maxPerPass entries.
func plan(self peer.ID, home []peer.ID, alts []peer.AddrInfo, snap *directory.Snapshot,
	notBefore map[peer.ID]time.Time, now time.Time, rng *rand.Rand) []peer.AddrInfo {
	out := make([]peer.AddrInfo, 0, maxPerPass)
	seen := map[peer.ID]bool{self: true}
	add := func(ai peer.AddrInfo) {
		if len(out) == maxPerPass || seen[ai.ID] || now.Before(notBefore[ai.ID]) {
			return
		}
		seen[ai.ID] = true
		out = append(out, ai)
	}
	for _, id := range home {
		if e, ok := snap.Get(id); ok {
			add(peer.AddrInfo{ID: id, Addrs: e.Addrs})
		}
	}
	for _, ai := range alts {
		add(ai)
	}
	var spare []directory.Entry
	var weights []int
	var megas []directory.Entry
	for _, e := range snap.Entries {
		switch {
		case seen[e.ID], now.Before(notBefore[e.ID]):
		case e.Role == protocol.RoleMega:
			megas = append(megas, e)
		case e.Capacity > e.Load:
			spare = append(spare, e)
			weights = append(weights, int(e.Capacity-e.Load))
		}
	}
	for _, i := range cluster.Sample(weights, maxPerPass-len(out), rng) {
		add(peer.AddrInfo{ID: spare[i].ID, Addrs: spare[i].Addrs})
	}
	ais := make([]peer.AddrInfo, len(megas))
	caps := make([]uint32, len(megas))
	for i, e := range megas {
		ais[i], caps[i] = peer.AddrInfo{ID: e.ID, Addrs: e.Addrs}, e.Capacity
	}
	for _, ai := range megaOrder(self, ais, caps) {
		add(ai)
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
