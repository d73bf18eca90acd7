// Package view is the ordinary node's tier of the directory: a bounded,
// verified partial view of the supernodes, served by supernodes (which
// hold the whole directory, from the announcement topic) and cross-checked
// by the client against other supernodes.
//
// A view for a set of keys holds, for each key, the first Neighbours
// distinct members of the server's ring at the key with their ring
// weights, up to Spares supernodes with spare capacity, and up to MaxMegas
// mega-supernodes. Every entry is its supernode's own signed GossipSub
// message (protocol.OpenSigned), so a server can leave entries out, or
// claim other weights, but cannot invent a supernode or change what one
// announced.
//
// The home cluster a client computes from a view is exactly the one the
// server computes from its whole ring: the first cluster.Size distinct
// members at a key are among the first Neighbours, every point of the ring
// between the key and the last of them belongs to one of them, and the
// points of a member depend only on its ID and weight. A ring built from
// the view's members (and any others: their points all fall later) walks
// the same points in the same order up to there (Home, tested against the
// full ring for random keys across ring changes).
//
// What a view server can do and what it cannot is stated in
// docs/ARCHITECTURE.md ("The directory's two tiers").
package view

import (
	"cmp"
	"math/rand/v2"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// View sizes.
const (
	// Neighbours is how many distinct ring members at a key a view
	// carries: the home cluster and as many successors, the supernodes
	// that take over the key's home when a member leaves.
	Neighbours = 2 * cluster.Size
	// Spares is how many supernodes with spare capacity a view carries
	// besides the neighbours: a client's failover pass asks up to 8.
	Spares = 8
	// MaxMegas is how many mega-supernodes a view carries (the fallback
	// tier; operators seed a few).
	MaxMegas = 8
)

// Index is what views need from one directory snapshot and ring,
// computed once: the ring's weights, the regular supernodes with room and
// their cumulative spare, the megas. A view server keeps the index of a
// recent snapshot, so that a request costs its ring lookups and its
// samples (O(keys + Spares × log n)), not a pass over a directory of
// 100,000 entries. The entries a view carries are looked up in the
// current snapshot (Build's s), so an index a second old serves the
// newest announcements; only the choice of spares is that old.
type Index struct {
	r       *ring.Ring
	s       *directory.Snapshot
	weights map[string]int
	spares  []peer.ID // regular supernodes with room
	cum     []int     // cum[i]: total spare of spares[:i+1]
	megas   []peer.ID
}

// NewIndex indexes snapshot s and ring r (nil for none).
func NewIndex(r *ring.Ring, s *directory.Snapshot) *Index {
	ix := &Index{r: r, s: s, weights: map[string]int{}}
	if r != nil {
		for _, m := range r.Members() {
			ix.weights[m.ID] = m.Weight
		}
	}
	total := 0
	for _, e := range s.Entries {
		switch {
		case e.Role == protocol.RoleMega:
			ix.megas = append(ix.megas, e.ID)
		case e.Role == protocol.RoleSupernode && cluster.Spare(e) > 0:
			total += cluster.Spare(e)
			ix.spares = append(ix.spares, e.ID)
			ix.cum = append(ix.cum, total)
		}
	}
	return ix
}

// Ring is the ring ix indexes.
func (ix *Index) Ring() *ring.Ring { return ix.r }

// Of reports whether ix indexes snapshot s and ring r.
func (ix *Index) Of(r *ring.Ring, s *directory.Snapshot) bool { return ix.r == r && ix.s == s }

// Build is NewIndex(r, s).Build(s, ...), for one view.
func Build(r *ring.Ring, s *directory.Snapshot, keys [][]byte, have map[peer.ID]uint64, neighboursOnly bool, rng *rand.Rand) *pb.ViewResponse {
	return NewIndex(r, s).Build(s, keys, have, neighboursOnly, rng)
}

// Build returns the view for keys, with the entries of snapshot s (the
// current one; ix may be of an older one): each key's Neighbours on the
// ring with their weights, then up to Spares regular supernodes with
// spare capacity (drawn by rng weighted by their spare, without
// replacement, as refused clients are spread), then up to MaxMegas megas
// at random. An entry appears once; one the client holds at the same or
// a newer seq (have) carries no signed message; entries without one
// (Entry.Signed nil), or no longer in s, are left out. At most
// protocol.MaxViewEntries entries. With neighboursOnly, no spares and no
// megas.
func (ix *Index) Build(s *directory.Snapshot, keys [][]byte, have map[peer.ID]uint64, neighboursOnly bool, rng *rand.Rand) *pb.ViewResponse {
	resp := &pb.ViewResponse{}
	if ix.r != nil {
		resp.RingVersion = ix.r.Version()
	}
	seen := map[peer.ID]bool{}
	add := func(id peer.ID) {
		e, ok := s.Get(id)
		if !ok || seen[id] || e.Signed == nil || len(resp.Entries) >= protocol.MaxViewEntries {
			return
		}
		seen[id] = true
		ve := &pb.ViewEntry{PeerId: []byte(id), Seq: e.Seq, Weight: uint32(ix.weights[id.String()])}
		if h, ok := have[id]; !ok || h < e.Seq {
			ve.Signed = e.Signed
		}
		resp.Entries = append(resp.Entries, ve)
	}
	if ix.r != nil {
		for _, k := range keys {
			for _, id := range ix.r.LookupN(k, Neighbours, nil) {
				if p, err := peer.Decode(id); err == nil {
					add(p)
				}
			}
		}
	}
	if neighboursOnly {
		return resp
	}
	for _, i := range ix.sampleSpares(rng) {
		add(ix.spares[i])
	}
	megas := ix.megas
	if len(megas) > MaxMegas {
		megas = nil
		for _, i := range rng.Perm(len(ix.megas))[:MaxMegas] {
			megas = append(megas, ix.megas[i])
		}
	}
	for _, id := range megas {
		add(id)
	}
	return resp
}

// sampleSpares draws up to Spares distinct indices of ix.spares, each
// with probability in proportion to its spare, without replacement. A
// small directory is drawn from exactly (cluster.Sample, O(n) a draw); a
// large one by drawing with replacement, by binary search of the
// cumulative spare, and drawing a repeat again, which is the same
// distribution at O(log n) a draw, giving up after 8 × Spares draws (one
// supernode with nearly all the room).
func (ix *Index) sampleSpares(rng *rand.Rand) []int {
	if len(ix.cum) == 0 {
		return nil
	}
	if len(ix.spares) <= 8*Spares {
		spare := make([]int, len(ix.cum))
		for i, c := range ix.cum {
			spare[i] = c
			if i > 0 {
				spare[i] -= ix.cum[i-1]
			}
		}
		return cluster.Sample(spare, Spares, rng)
	}
	total := ix.cum[len(ix.cum)-1]
	var out []int
	for try := 0; try < 8*Spares && len(out) < Spares; try++ {
		i, _ := slices.BinarySearch(ix.cum, rng.IntN(total)+1)
		if !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	return out
}

// Verifier says whether a client has verified a supernode's announcement
// of at least seq (directory.Directory does): it holds the entry, or held
// it and expired it since (the server's copy may outlive the client's by
// the spread of their clocks and expiry ticks).
type Verifier interface {
	Verified(id peer.ID, seq uint64) bool
}

// Members returns the ring members of a view whose announcements the
// client verified (so not invented): ring.Member of each entry with a
// weight, sorted by ID, at most one per peer. An entry the client has not
// verified (the server omitted its signed message although the client
// never had it, or the client refused it) is left out.
func Members(resp *pb.ViewResponse, v Verifier) []ring.Member {
	var ms []ring.Member
	seen := map[peer.ID]bool{}
	for _, ve := range resp.GetEntries() {
		p, err := peer.IDFromBytes(ve.GetPeerId())
		if err != nil || ve.GetWeight() == 0 || seen[p] {
			continue
		}
		if !v.Verified(p, ve.GetSeq()) {
			continue
		}
		seen[p] = true
		// No honest server gives more than cluster.MaxWeight; a larger
		// one would only make the client's ring fail to build.
		ms = append(ms, ring.Member{ID: p.String(), Weight: min(int(ve.GetWeight()), cluster.MaxWeight)})
	}
	slices.SortFunc(ms, func(a, b ring.Member) int { return cmp.Compare(a.ID, b.ID) })
	return ms
}

// Home is key's home cluster computed from a view's members (Members):
// the first cluster.Size distinct members at the key, the same as the
// server's own when the view is complete. nil when the members do not
// make a ring.
func Home(ms []ring.Member, key []byte) []peer.ID {
	if len(ms) == 0 {
		return nil
	}
	r, err := ring.New(ms)
	if err != nil {
		return nil
	}
	return cluster.Home(r, key)
}

// Opinion is what one supernode's view says a key's home cluster is.
type Opinion struct {
	Server peer.ID
	Home   []peer.ID
}

// Verdict is the outcome of a cross-check (Judge).
type Verdict int

// Verdicts.
const (
	// Agree: every checker that answered gives the primary's home.
	Agree Verdict = iota
	// Outvoted: at least two checkers give one home other than the
	// primary's, none gives the primary's, and that home has a member
	// that answered the check itself yet is not on the primary's ring:
	// the primary omitted a live supernode.
	Outvoted
	// Undecided: anything else: views of a ring that is changing taken
	// at different moments, or rings whose weights differ (honest
	// supernodes ramp a newcomer's weight from when each first saw it,
	// so their rings can differ for a whole ramp period). The client
	// checks again later.
	Undecided
)

func (v Verdict) String() string {
	switch v {
	case Agree:
		return "agree"
	case Outvoted:
		return "outvoted"
	}
	return "undecided"
}

// Judge compares the home cluster a client's primary view gives (primary)
// with the homes other supernodes' views give for the same key (others,
// each answered by its Server). onRing reports whether a supernode is a
// member of the primary's view's ring.
//
// Only an omission outvotes the primary: a home that two or more others
// give, none gives the primary's, and one of its members answered
// (so it is alive and speaks the protocol) while the primary's view does
// not hold it. Homes that differ by weights alone stay undecided: a
// weight is not signed, and honest supernodes differ in weights for as
// long as a newcomer ramps (cluster.RampIntervals announce intervals),
// which no count of checks can tell from a lie; a lie about weights can
// only reorder supernodes that really exist.
func Judge(primary []peer.ID, onRing func(peer.ID) bool, others []Opinion) Verdict {
	if len(others) == 0 {
		return Undecided
	}
	backs, against := 0, map[string]int{}
	homes := map[string][]peer.ID{}
	answered := map[peer.ID]bool{}
	for _, o := range others {
		answered[o.Server] = true
		if slices.Equal(o.Home, primary) {
			backs++
			continue
		}
		k := homeKey(o.Home)
		against[k]++
		homes[k] = o.Home
	}
	if backs == len(others) {
		return Agree
	}
	if backs > 0 {
		return Undecided
	}
	for k, n := range against {
		if n < 2 {
			continue
		}
		for _, m := range homes[k] {
			if answered[m] && !onRing(m) {
				return Outvoted
			}
		}
	}
	return Undecided
}

func homeKey(h []peer.ID) string {
	var b []byte
	for _, p := range h {
		b = append(append(b, p...), 0)
	}
	return string(b)
}
