package client

import (
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/overlay/backoff"
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
	return planWith(nil, nil, self, home, last, alts, snap, notBefore, now, rng)
}

// planWith is plan with a mega ring and a plan index built beforehand
// (nil: none); the ring is used only if it was built from exactly the
// megas this pass may ask, the index only if it was built from snap.
func planWith(mr *MegaRing, idx *PlanIndex, self peer.ID, home []peer.ID, last peer.ID, alts []peer.AddrInfo, snap *directory.Snapshot,
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
	// spare and megas index snap.Entries (an entry is a few hundred bytes:
	// a pass over a directory of thousands copies none of them).
	if idx == nil || idx.snap != snap {
		idx = NewPlanIndex(snap)
	}
	var megas []int
	for _, i := range idx.megas {
		if !skip(snap.Entries[i].ID) {
			megas = append(megas, i)
		}
	}
	// The spare supernodes this pass may ask: the index's, with those it
	// skips weighted 0, which cluster.Sample never picks and draws around
	// exactly as if they were absent. Only the few peers seen or parked
	// are looked up, not every spare entry.
	weights := slices.Clone(idx.weights)
	for id := range seen {
		idx.zero(weights, id)
	}
	for id, until := range notBefore {
		if now.Before(until) {
			idx.zero(weights, id)
		}
	}
	ais := make([]peer.AddrInfo, len(megas))
	caps := make([]uint32, len(megas))
	for k, i := range megas {
		e := &snap.Entries[i]
		ais[k], caps[k] = peer.AddrInfo{ID: e.ID, Addrs: e.Addrs}, e.Capacity
	}
	megaSlot := 0
	if len(megas) > 0 {
		megaSlot = 1
	}
	for _, ai := range alts {
		add(ai, maxPerPass-megaSlot)
	}
	for _, i := range cluster.Sample(weights, maxPerPass-megaSlot-len(out), rng) {
		e := &snap.Entries[idx.spare[i]]
		add(peer.AddrInfo{ID: e.ID, Addrs: e.Addrs}, maxPerPass-megaSlot)
	}
	if mr == nil || !mr.matches(ais, caps) {
		mr = NewMegaRing(ais, caps)
	}
	for _, ai := range mr.order(self) {
		add(ai, maxPerPass)
	}
	return out
}

// PlanIndex is what a failover pass scans of one directory snapshot: its
// mega-supernodes and its other supernodes with spare capacity
// (cluster.Spare), as indices into the snapshot's entries in their order,
// with their spare capacity. Building it is one pass over the snapshot; a
// caller planning many passes against one snapshot (testnet/sim plans
// hundreds of thousands) builds it once and passes it in PassInput.Index,
// and a pass then costs O(spare + megas) instead of O(directory). In a
// loaded network most supernodes are full, so that is a small fraction.
type PlanIndex struct {
	snap    *directory.Snapshot
	megas   []int
	spare   []int
	weights []int
}

// zero sets id's weight in weights (a copy of x.weights) to 0, if id is
// one of the spare supernodes. x.spare is in entry order, which is ID
// order, so a binary search finds it.
func (x *PlanIndex) zero(weights []int, id peer.ID) {
	k, ok := slices.BinarySearchFunc(x.spare, id, func(i int, id peer.ID) int {
		return strings.Compare(string(x.snap.Entries[i].ID), string(id))
	})
	if ok {
		weights[k] = 0
	}
}

// NewPlanIndex indexes snap.
func NewPlanIndex(snap *directory.Snapshot) *PlanIndex {
	x := &PlanIndex{snap: snap}
	for i := range snap.Entries {
		e := &snap.Entries[i]
		switch {
		case e.Role == protocol.RoleMega:
			x.megas = append(x.megas, i)
		case cluster.Spare(*e) > 0:
			x.spare = append(x.spare, i)
			x.weights = append(x.weights, cluster.Spare(*e))
		}
	}
	return x
}

// megaOrder orders mega-supernodes for client self by a ring of the megas
// weighted by capacity, so clients falling back spread over them in
// proportion to their size instead of all picking the first. Each client's
// order is stable: it does not change between passes.
func megaOrder(self peer.ID, megas []peer.AddrInfo, caps []uint32) []peer.AddrInfo {
	return NewMegaRing(megas, caps).order(self)
}

// MegaRing is the ring megaOrder orders mega-supernodes by. Building it
// costs a ring of up to cluster.MaxWeight × 160 points per mega (about a
// millisecond for fifty megas), so a caller planning many passes against
// one directory can build it once (SnapshotMegaRing) and pass it in
// PassInput.Megas; a pass uses it only when it holds exactly the megas,
// with the capacities, that the pass may ask.
type MegaRing struct {
	megas []peer.AddrInfo
	caps  []uint32
	r     *ring.Ring // nil for fewer than two megas, or if ring.New failed
	byID  map[string]peer.AddrInfo
}

// NewMegaRing builds the ring of megas weighted by caps (caps[i] is
// megas[i]'s capacity).
func NewMegaRing(megas []peer.AddrInfo, caps []uint32) *MegaRing {
	m := &MegaRing{megas: megas, caps: caps}
	if len(megas) < 2 {
		return m
	}
	members := make([]ring.Member, len(megas))
	m.byID = make(map[string]peer.AddrInfo, len(megas))
	for i, a := range megas {
		members[i] = ring.Member{ID: a.ID.String(), Weight: cluster.Weight(caps[i])}
		m.byID[a.ID.String()] = a
	}
	if r, err := ring.New(members); err == nil {
		m.r = r
	}
	return m
}

// SnapshotMegaRing is the MegaRing of every mega-supernode of snap, in
// the order plan lists them.
func SnapshotMegaRing(snap *directory.Snapshot) *MegaRing {
	var ais []peer.AddrInfo
	var caps []uint32
	for _, e := range snap.Entries {
		if e.Role == protocol.RoleMega {
			ais = append(ais, peer.AddrInfo{ID: e.ID, Addrs: e.Addrs})
			caps = append(caps, e.Capacity)
		}
	}
	return NewMegaRing(ais, caps)
}

// matches reports whether m was built from exactly these megas and
// capacities, in this order.
func (m *MegaRing) matches(megas []peer.AddrInfo, caps []uint32) bool {
	return slices.Equal(m.caps, caps) &&
		slices.EqualFunc(m.megas, megas, func(a, b peer.AddrInfo) bool {
			return a.ID == b.ID && slices.EqualFunc(a.Addrs, b.Addrs, ma.Multiaddr.Equal)
		})
}

// order is the megas in self's order.
func (m *MegaRing) order(self peer.ID) []peer.AddrInfo {
	if m.r == nil {
		return m.megas
	}
	out := make([]peer.AddrInfo, 0, len(m.megas))
	for _, id := range m.r.LookupN([]byte(self), len(m.megas), nil) {
		out = append(out, m.byID[id])
	}
	return out
}

// ReturnTargets is the pure return-home decision: the members of the home
// cluster, in ring order, that a client attached away from home asks to
// take it back — those in the directory that announced spare capacity and
// did not ask it to wait. Empty when the client is already home (current
// is a member) or no member has room. self, the client's own ID, is never
// a target: a node promoted by --role auto is on the ring itself, and
// libp2p refuses to dial self.
func ReturnTargets(self peer.ID, home []peer.ID, current peer.ID, snap *directory.Snapshot,
	notBefore map[peer.ID]time.Time, now time.Time) []peer.AddrInfo {
	var out []peer.AddrInfo
	for _, id := range home {
		if id == current {
			return nil
		}
	}
	for _, id := range home {
		e, ok := snap.Get(id)
		if id == self || !ok || e.Load >= e.Capacity || now.Before(notBefore[id]) {
			continue
		}
		out = append(out, peer.AddrInfo{ID: id, Addrs: e.Addrs})
	}
	return out
}

// PassInput is what one failover pass is planned from.
type PassInput struct {
	Self peer.ID
	// Home is the client's home cluster on its ring, in ring order.
	Home []peer.ID
	// Last is the supernode of the previous session ("" for none).
	Last peer.ID
	// Alts are the alternatives offered by the refusals of the last pass
	// (or the Detach that ended the session).
	Alts     []peer.AddrInfo
	Snapshot *directory.Snapshot
	// NotBefore holds the peers that asked the client to wait, and until
	// when. The pass records its refusals in it (it is created if nil;
	// NotBefore returns it) and drops expired entries in Finish.
	NotBefore map[peer.ID]time.Time
	Now       time.Time
	// Bootstrap are asked when the plan is empty (no directory yet).
	Bootstrap []peer.AddrInfo
	// RedirectWait is how long a REDIRECT parks its peer: the announce
	// interval, by which it has said whether it admits again.
	RedirectWait time.Duration
	// Megas, if not nil, is the mega ring built beforehand for Snapshot
	// (SnapshotMegaRing); the pass builds its own when it does not match.
	Megas *MegaRing
	// Index, if not nil, is NewPlanIndex(Snapshot) built beforehand; the
	// pass builds its own when it was built from another snapshot.
	Index *PlanIndex
}

// Pass is the pure bookkeeping of one failover pass: which supernode to
// ask next, and what each refusal changes (the wait it asks for, the
// alternatives it offers, followed within the pass up to MaxPerPass). The
// daemon's client drives it over the network; testnet/sim drives it with
// simulated answers. It does not read a clock.
type Pass struct {
	self         peer.ID
	now          time.Time
	redirectWait time.Duration
	candidates   []peer.AddrInfo
	next         int
	notBefore    map[peer.ID]time.Time
	retryAfter   time.Duration
	offered      []peer.AddrInfo
}

// MaxPerPass bounds the supernodes one failover pass asks.
const MaxPerPass = maxPerPass

// NewPass plans a pass (plan; the bootstrap peers that did not ask to
// wait when the plan is empty). rng is the client's own source.
func NewPass(in PassInput, rng *rand.Rand) *Pass {
	p := &Pass{self: in.Self, now: in.Now, redirectWait: in.RedirectWait, notBefore: in.NotBefore}
	p.candidates = planWith(in.Megas, in.Index, in.Self, in.Home, in.Last, in.Alts, in.Snapshot, in.NotBefore, in.Now, rng)
	if len(p.candidates) == 0 {
		// No directory yet: the bootstrap peers may be supernodes.
		for _, b := range in.Bootstrap {
			if b.ID != in.Self && !in.Now.Before(in.NotBefore[b.ID]) {
				p.candidates = append(p.candidates, b)
			}
		}
	}
	return p
}

// Candidates returns the supernodes planned so far (alternatives followed
// are appended as they come). Callers must not modify it.
func (p *Pass) Candidates() []peer.AddrInfo { return p.candidates }

// Next returns the next supernode to ask, or false when the pass is over.
func (p *Pass) Next() (peer.AddrInfo, bool) {
	if p.next >= len(p.candidates) {
		return peer.AddrInfo{}, false
	}
	p.next++
	return p.candidates[p.next-1], true
}

// Refused records a refusal from id: BUSY (busy, with its retry-after
// hint) parks id for the hint, REDIRECT for RedirectWait; the offered
// alternatives that are new, not self and not parked are asked later in
// this pass, up to MaxPerPass in all.
func (p *Pass) Refused(id peer.ID, busy bool, retryAfter time.Duration, more []peer.AddrInfo) {
	if p.notBefore == nil {
		p.notBefore = map[peer.ID]time.Time{}
	}
	if busy {
		p.retryAfter = max(p.retryAfter, retryAfter)
		p.notBefore[id] = p.now.Add(retryAfter)
	} else {
		p.notBefore[id] = p.now.Add(p.redirectWait)
	}
	for _, alt := range more {
		if len(p.candidates) >= maxPerPass {
			break
		}
		if alt.ID != p.self && !slices.ContainsFunc(p.candidates, func(x peer.AddrInfo) bool { return x.ID == alt.ID }) &&
			!p.now.Before(p.notBefore[alt.ID]) {
			p.candidates = append(p.candidates, alt)
		}
	}
	p.offered = append(p.offered, more...)
}

// Finish ends a pass that found no session: it drops the waits that have
// passed from NotBefore and returns the largest retry-after hint heard and
// every alternative offered.
func (p *Pass) Finish() (time.Duration, []peer.AddrInfo) {
	for id, t := range p.notBefore {
		if !p.now.Before(t) {
			delete(p.notBefore, id)
		}
	}
	return p.retryAfter, p.offered
}

// NotBefore returns the pass's wait map (the input's, or the one Refused
// created).
func (p *Pass) NotBefore() map[peer.ID]time.Time { return p.notBefore }

// FailoverSpread is the window a client whose session ended spreads its
// next pass over: the spread its Detach asked for, or one keepalive
// interval when there was none (a dead supernode's clients all notice at
// about the same moment).
func FailoverSpread(detachSpread, keepalive time.Duration) time.Duration {
	if detachSpread == 0 {
		return keepalive
	}
	return detachSpread
}

// NextReturnDelay is how long an attached client waits before looking for
// room at home again: half a return interval plus a random part of one.
func NextReturnDelay(interval time.Duration, rng *rand.Rand) time.Duration {
	return interval/2 + backoff.Stagger(interval, rng)
}
