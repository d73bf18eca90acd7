package node

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/overlay/view"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode"
)

// The ordinary node's tier of the directory (overlay/view). A pinned
// ordinary node does not subscribe to the announcement topic: it asks a
// supernode (the one it is attached to, else a bootstrap peer, else one of
// its view) for the neighbourhood of its own key and its groups' keys on
// that supernode's ring, spares and megas, once per announce interval of
// its entries. Every entry is checked (protocol.OpenSigned) and applied to
// the node's directory, which then holds only the latest view; the node's
// ring is built from the view's members with the server's weights, so its
// home clusters are the server's. After each refresh it cross-checks its
// own home cluster with a second supernode of another subnet; when they
// differ it asks the members both name, and leaves its supernode for
// viewDistrust when they outvote it (view.Judge).

const (
	// viewDistrust is how long a supernode whose view was outvoted is
	// neither asked for views nor attached to.
	viewDistrust = 10 * time.Minute
	// viewRetryMin is the first wait after a refresh that found no
	// server; it doubles up to the announce interval.
	viewRetryMin = 250 * time.Millisecond
	// viewServersPerRefresh bounds the supernodes one refresh asks.
	viewServersPerRefresh = 4
	viewFetchTimeout      = 5 * time.Second
	// viewStrikes is how many cross-checks in a row may find the node's
	// supernode on another ring version than the checker, with another
	// home, before the home members are asked: rings differ for a
	// refresh or two while supernodes come and go, and a supernode that
	// answers with a version of its own for longer is judged as if it
	// claimed the checker's.
	viewStrikes = 3
)

// usesView reports whether this node keeps a partial view instead of
// hearing the announcement topic: a pinned ordinary node, unless
// Config.FullDirectory. An auto node is a candidate supernode and needs
// the whole directory for its role rules.
func (n *Node) usesView() bool { return n.cfg.Role == RoleOrdinary && !n.cfg.FullDirectory }

// PartialView reports whether the node keeps a partial view of the
// directory (a pinned ordinary node) rather than the whole directory.
func (n *Node) PartialView() bool { return n.usesView() }

// RingVersion is the version of the ring the node routes by: its own
// ring's, or on a node with a partial view the version of the ring the
// view was taken from ("" before it has one).
func (n *Node) RingVersion() string {
	r := n.rings.Load()
	if r == nil {
		return ""
	}
	if v, _ := n.viewVersion.Load().(string); v != "" && n.usesView() {
		return v
	}
	return r.Version()
}

// viewState is the view loop's memory of supernodes: those it left for a
// view that was outvoted, until when, and the cross-checks in a row that
// found each on another ring version with another home.
type viewState struct {
	distrusted map[peer.ID]time.Time
	strikes    map[peer.ID]int
}

// fetched is one supernode's answer to a view request.
type fetched struct {
	server  peer.ID
	entries []peer.ID // every entry of the response
	members []ring.Member
	home    []peer.ID // the node's own home cluster by members
	version string
}

// viewLoop refreshes the partial view until ctx ends.
func (n *Node) viewLoop(ctx context.Context) {
	rng := rand.New(rand.NewPCG(n.seed(), n.seed()))
	vs := &viewState{distrusted: map[peer.ID]time.Time{}, strikes: map[peer.ID]int{}}
	retry := viewRetryMin
	for {
		d := retry
		if n.refreshView(ctx, rng, vs) {
			retry = viewRetryMin
			d = n.viewInterval()
			d -= time.Duration(rng.Int64N(int64(d/10) + 1))
		} else {
			retry = min(2*retry, n.cfg.AnnounceInterval)
		}
		select {
		case <-ctx.Done():
			return
		case <-n.viewKick:
		case <-time.After(d):
		}
	}
}

// kickView asks the view loop for a refresh now (a group was joined: its
// home must be on the ring before its messages come).
func (n *Node) kickView() {
	select {
	case n.viewKick <- struct{}{}:
	default:
	}
}

// viewInterval is the wait between refreshes: the shortest announce
// interval among the view's entries (they expire after
// protocol.MissedAnnouncements of them), at least this node's own.
func (n *Node) viewInterval() time.Duration {
	es := n.dir.Snapshot().Entries
	if len(es) == 0 {
		return n.cfg.AnnounceInterval
	}
	iv := protocol.MaxAnnounceInterval
	for _, e := range es {
		iv = min(iv, protocol.ClampInterval(e.Interval, 0))
	}
	return max(iv, n.cfg.AnnounceInterval)
}

// refreshView fetches the view from the first supernode that answers,
// makes it the node's directory and ring, and cross-checks it. It reports
// whether a supernode answered.
func (n *Node) refreshView(ctx context.Context, rng *rand.Rand, vs *viewState) bool {
	now := n.now()
	distrusted := vs.distrusted
	for p, t := range distrusted {
		if !now.Before(t) {
			delete(distrusted, p)
		}
	}
	var primary *fetched
	tried := map[peer.ID]bool{}
	for range viewServersPerRefresh {
		// The candidates again after every answer: a hint from an
		// ordinary peer (entries, no ring) names supernodes to ask.
		i := slices.IndexFunc(n.viewServers(rng, distrusted), func(ai peer.AddrInfo) bool { return !tried[ai.ID] })
		if i < 0 {
			break
		}
		ai := n.viewServers(rng, distrusted)[i]
		tried[ai.ID] = true
		f, err := n.fetchFull(ctx, ai)
		if err != nil {
			n.log.Debug("view fetch", "supernode", ai.ID.ShortString(), "err", err)
			continue
		}
		if len(f.members) > 0 {
			primary = f
			break
		}
	}
	if primary == nil {
		return false
	}
	n.adoptView(primary)
	n.crossCheck(ctx, primary, rng, vs)
	return true
}

// startViewHints lets this node answer view requests from its own partial
// view, as hints: its entries (each its supernode's own signed message)
// without ring weights, so that a node that joined through it (a
// bootstrap peer or an mDNS neighbour that is an ordinary node) learns
// supernodes to ask for a real view.
func (n *Node) startViewHints() {
	vs := supernode.NewViewServer(func() *ring.Ring { return nil }, n.dir.Snapshot, func() bool { return true }, n.now,
		rand.New(rand.NewPCG(n.seed(), n.seed())), n.base.With("part", "view-hints"))
	n.host.SetStreamHandler(protocol.ViewID, vs.Handle)
}

// adoptView makes f the node's view: the directory keeps only f's entries
// and the ring is built from f's members.
func (n *Node) adoptView(f *fetched) {
	n.dir.Retain(func(p peer.ID) bool { return slices.Contains(f.entries, p) })
	n.viewVersion.Store(f.version)
	if r := n.rings.Load(); r != nil && slices.Equal(r.Members(), f.members) {
		return
	}
	n.publishRing(f.members, f.version)
}

// viewServers lists the supernodes to ask for the view, in order: the one
// the node is attached to, connected bootstrap peers, the view's regular
// supernodes at random, connected peers that speak the view protocol
// (identify told), then the other bootstrap peers; none distrusted, at
// most viewServersPerRefresh.
func (n *Node) viewServers(rng *rand.Rand, distrusted map[peer.ID]time.Time) []peer.AddrInfo {
	var out []peer.AddrInfo
	add := func(ai peer.AddrInfo) {
		if _, bad := distrusted[ai.ID]; bad || ai.ID == n.host.ID() || len(out) >= viewServersPerRefresh ||
			slices.ContainsFunc(out, func(x peer.AddrInfo) bool { return x.ID == ai.ID }) {
			return
		}
		out = append(out, ai)
	}
	if n.client != nil {
		if a, ok := n.client.Attachment(); ok {
			add(peer.AddrInfo{ID: a.Supernode})
		}
	}
	for _, b := range n.bootstrap {
		if n.host.Network().Connectedness(b.ID) == network.Connected {
			add(b)
		}
	}
	es := n.dir.Snapshot().Entries
	for _, i := range rng.Perm(len(es)) {
		if es[i].Role == protocol.RoleSupernode || es[i].Role == protocol.RoleMega {
			add(peer.AddrInfo{ID: es[i].ID, Addrs: es[i].Addrs})
		}
	}
	// Peers it is connected to that speak the view protocol (found by
	// mDNS, or that connected to it), then any bootstrap peer, connected
	// or not.
	for _, p := range n.host.Network().Peers() {
		if ps, err := n.host.Peerstore().SupportsProtocols(p, protocol.ViewID); err == nil && len(ps) > 0 {
			add(peer.AddrInfo{ID: p})
		}
	}
	for _, b := range n.bootstrap {
		add(b)
	}
	return out
}

// viewKeys are the keys the node's view covers: its own, then its groups'.
func (n *Node) viewKeys() [][]byte {
	keys := [][]byte{[]byte(n.host.ID())}
	if n.client != nil {
		for _, g := range n.client.Groups() {
			keys = append(keys, []byte(g))
		}
	}
	return keys
}

// fetchFull fetches the node's whole view from ai: the first
// protocol.MaxViewKeys keys with spares and megas, any further keys in
// more requests for their neighbourhoods only.
func (n *Node) fetchFull(ctx context.Context, ai peer.AddrInfo) (*fetched, error) {
	keys := n.viewKeys()
	var all *fetched
	for len(keys) > 0 {
		k := min(len(keys), protocol.MaxViewKeys)
		f, err := n.fetchView(ctx, ai, keys[:k], all != nil, "refresh")
		if err != nil {
			return nil, err
		}
		if all == nil {
			all = f
		} else {
			all.entries = append(all.entries, f.entries...)
			for _, m := range f.members {
				if !slices.ContainsFunc(all.members, func(x ring.Member) bool { return x.ID == m.ID }) {
					all.members = append(all.members, m)
				}
			}
		}
		keys = keys[k:]
	}
	slices.SortFunc(all.members, func(a, b ring.Member) int { return cmp.Compare(a.ID, b.ID) })
	return all, nil
}

// fetchView asks ai for the view of keys, applies its signed entries to
// the directory (each checked; refusals counted by reason), and returns
// the members and the node's home it gives.
func (n *Node) fetchView(ctx context.Context, ai peer.AddrInfo, keys [][]byte, neighboursOnly bool, purpose string) (*fetched, error) {
	resp, err := n.askView(ctx, ai, keys, neighboursOnly)
	if err != nil {
		n.m.viewFetches.WithLabelValues(purpose, "error").Inc()
		return nil, err
	}
	n.m.viewFetches.WithLabelValues(purpose, "ok").Inc()
	n.m.viewBytes.Add(float64(proto.Size(resp)))
	f := &fetched{server: ai.ID, version: resp.GetRingVersion()}
	now := n.now()
	for _, ve := range resp.GetEntries() {
		id, err := peer.IDFromBytes(ve.GetPeerId())
		if err != nil {
			continue
		}
		f.entries = append(f.entries, id)
		if len(ve.GetSigned()) == 0 {
			continue
		}
		result := "accepted"
		// One signature check: OpenSigned's; Receive trusts its signer.
		signer, data, err := protocol.OpenSigned(ve.GetSigned())
		switch {
		case err != nil:
		case signer != id:
			err = protocol.Reject(protocol.ReasonSignerMismatch, "entry for %s signed by %s", id.ShortString(), signer.ShortString())
		default:
			_, err = n.dir.Receive(signer, data, ve.GetSigned(), now)
		}
		if err != nil {
			// stale_seq: the node holds it already, or a newer one (its
			// signature was checked all the same, so it is counted).
			result = string(protocol.ReasonOf(err))
			n.log.Debug("view entry refused", "server", ai.ID.ShortString(), "entry", id.ShortString(), "err", err)
		}
		n.m.viewEntries.WithLabelValues(result).Inc()
	}
	f.members = view.Members(resp, n.dir)
	f.home = view.Home(f.members, []byte(n.host.ID()))
	return f, nil
}

// askView runs one view request.
func (n *Node) askView(ctx context.Context, ai peer.AddrInfo, keys [][]byte, neighboursOnly bool) (*pb.ViewResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, viewFetchTimeout)
	defer cancel()
	if len(ai.Addrs) > 0 {
		n.host.Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.TempAddrTTL)
	}
	s, err := n.host.NewStream(ctx, ai.ID, protocol.ViewID)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	req := &pb.ViewRequest{Keys: keys, NeighboursOnly: neighboursOnly}
	for _, e := range n.dir.Snapshot().Entries {
		if len(req.Have) == protocol.MaxViewEntries {
			break
		}
		req.Have = append(req.Have, &pb.ViewHave{PeerId: []byte(e.ID), Seq: e.Seq})
	}
	if err := protocol.WriteFrame(s, req); err != nil {
		s.Reset()
		return nil, err
	}
	_ = s.CloseWrite()
	resp := &pb.ViewResponse{}
	if err := protocol.NewFrameReader(s, protocol.MaxViewFrame).Read(resp); err != nil {
		s.Reset()
		return nil, fmt.Errorf("view from %s: %w", ai.ID.ShortString(), err)
	}
	return resp, nil
}

// crossCheck compares primary's home cluster for the node's key with a
// second supernode's (another subnet, not in that home, not primary).
// When they differ on the same ring version, or on different versions
// viewStrikes times in a row, it asks the members both homes name; when
// those outvote primary (view.Judge: primary omitted a live member of
// the home they agree on), the node leaves primary and adopts the
// majority's view.
func (n *Node) crossCheck(ctx context.Context, primary *fetched, rng *rand.Rand, vs *viewState) {
	checker, ok := n.viewChecker(primary, rng, vs.distrusted)
	if !ok {
		return
	}
	key := [][]byte{[]byte(n.host.ID())}
	c, err := n.fetchView(ctx, checker, key, true, "check")
	if err != nil {
		return
	}
	if slices.Equal(c.home, primary.home) {
		n.m.viewChecks.WithLabelValues(view.Agree.String()).Inc()
		delete(vs.strikes, primary.server)
		return
	}
	if c.version != primary.version {
		if vs.strikes[primary.server]++; vs.strikes[primary.server] < viewStrikes {
			n.m.viewChecks.WithLabelValues(view.Undecided.String()).Inc()
			return
		}
	}
	ops := []view.Opinion{{Server: c.server, Home: c.home}}
	answers := []*fetched{c}
	snap := n.dir.Snapshot()
	for _, p := range union(primary.home, c.home) {
		if p == primary.server || p == c.server || p == n.host.ID() {
			continue
		}
		ai := peer.AddrInfo{ID: p}
		if e, ok := snap.Get(p); ok {
			ai.Addrs = e.Addrs
		}
		if f, err := n.fetchView(ctx, ai, key, true, "check"); err == nil {
			ops = append(ops, view.Opinion{Server: f.server, Home: f.home})
			answers = append(answers, f)
		}
	}
	onRing := func(p peer.ID) bool {
		return slices.ContainsFunc(primary.members, func(m ring.Member) bool { return m.ID == p.String() })
	}
	verdict := view.Judge(primary.home, onRing, ops)
	n.m.viewChecks.WithLabelValues(verdict.String()).Inc()
	// The strikes start again: rings whose weights differ (a ramp) stay
	// undecided for as long as they differ, and are judged again after
	// viewStrikes more checks, not at every refresh.
	delete(vs.strikes, primary.server)
	if verdict != view.Outvoted {
		n.log.Debug("view cross-check undecided", "supernode", primary.server.ShortString(), "its_home", shortIDs(primary.home),
			"others_home", shortIDs(majority(ops)), "opinions", len(ops))
		return
	}
	vs.distrusted[primary.server] = n.now().Add(viewDistrust)
	n.log.Warn("supernode's directory view outvoted: leaving it", "supernode", primary.server.ShortString(),
		"its_home", shortIDs(primary.home), "others", len(ops))
	if n.client != nil {
		n.client.Distrust(primary.server, viewDistrust, "its directory view disagrees with other supernodes'")
	}
	// Adopt the view of the majority for the node's own key until the
	// next refresh asks another supernode for the whole view.
	best := majority(ops)
	for _, f := range answers {
		if slices.Equal(f.home, best) {
			n.publishRing(f.members, f.version)
			return
		}
	}
}

// majority is the home cluster most opinions give.
func majority(ops []view.Opinion) []peer.ID {
	var best []peer.ID
	bestN := 0
	for _, o := range ops {
		k := 0
		for _, x := range ops {
			if slices.Equal(x.Home, o.Home) {
				k++
			}
		}
		if k > bestN {
			best, bestN = o.Home, k
		}
	}
	return best
}

// viewChecker chooses the supernode that cross-checks primary: a regular
// supernode of the view, neither primary nor in primary's home cluster,
// preferably of another subnet (an attacker's supernodes tend to share
// one), at random; else a home member other than primary.
func (n *Node) viewChecker(primary *fetched, rng *rand.Rand, distrusted map[peer.ID]time.Time) (peer.AddrInfo, bool) {
	snap := n.dir.Snapshot()
	var primarySubnet string
	if e, ok := snap.Get(primary.server); ok {
		primarySubnet = cluster.Subnet(e.Addrs)
	}
	var other, same, home []peer.AddrInfo
	for _, e := range snap.Entries {
		if _, bad := distrusted[e.ID]; bad || e.ID == primary.server || e.ID == n.host.ID() || e.Role != protocol.RoleSupernode {
			continue
		}
		ai := peer.AddrInfo{ID: e.ID, Addrs: e.Addrs}
		switch {
		case slices.Contains(primary.home, e.ID):
			home = append(home, ai)
		case primarySubnet == "" || cluster.Subnet(e.Addrs) != primarySubnet:
			other = append(other, ai)
		default:
			same = append(same, ai)
		}
	}
	for _, set := range [][]peer.AddrInfo{other, same, home} {
		if len(set) > 0 {
			return set[rng.IntN(len(set))], true
		}
	}
	return peer.AddrInfo{}, false
}

// union is a then the elements of b not in a.
func union(a, b []peer.ID) []peer.ID {
	out := slices.Clone(a)
	for _, p := range b {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func shortIDs(ids []peer.ID) []string {
	out := make([]string, len(ids))
	for i, p := range ids {
		out[i] = p.ShortString()
	}
	return out
}
