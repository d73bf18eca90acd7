package viewclient

import (
	"context"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/overlay/view"
	"github.com/overlayd/overlayd/protocol"
)

// crossCheck compares primary's home cluster for the node's key with a
// second supernode's (another subnet, not in that home, not primary).
// When they differ on the same ring version, or on different versions
// strikes times in a row, it asks the members both homes name; when those
// outvote primary (view.Judge: primary omitted a live member of the home
// they agree on), the node leaves primary (Session.Distrust) and adopts
// the majority's view.
func (c *Client) crossCheck(ctx context.Context, primary *fetched) {
	checker, ok := c.checker(primary)
	if !ok {
		return
	}
	self := c.cfg.Host.ID()
	key := [][]byte{[]byte(self)}
	ck, err := c.fetch(ctx, checker, key, true, purposeCheck)
	if err != nil {
		return
	}
	if slices.Equal(ck.home, primary.home) {
		c.m.checks.WithLabelValues(view.Agree.String()).Inc()
		delete(c.strikes, primary.server)
		return
	}
	if ck.version != primary.version {
		if c.strikes[primary.server]++; c.strikes[primary.server] < strikes {
			c.m.checks.WithLabelValues(view.Undecided.String()).Inc()
			return
		}
	}
	ops := []view.Opinion{{Server: ck.server, Home: ck.home}}
	answers := []*fetched{ck}
	snap := c.cfg.Dir.Snapshot()
	for _, p := range union(primary.home, ck.home) {
		if p == primary.server || p == ck.server || p == self {
			continue
		}
		ai := peer.AddrInfo{ID: p}
		if e, ok := snap.Get(p); ok {
			ai.Addrs = e.Addrs
		}
		if f, err := c.fetch(ctx, ai, key, true, purposeCheck); err == nil {
			ops = append(ops, view.Opinion{Server: f.server, Home: f.home})
			answers = append(answers, f)
		}
	}
	onRing := func(p peer.ID) bool {
		return slices.ContainsFunc(primary.members, func(m ring.Member) bool { return m.ID == p.String() })
	}
	verdict := view.Judge(primary.home, onRing, ops)
	c.m.checks.WithLabelValues(verdict.String()).Inc()
	// The strikes start again: rings whose weights differ (a ramp) stay
	// undecided for as long as they differ, and are judged again after
	// strikes more checks, not at every refresh.
	delete(c.strikes, primary.server)
	if verdict != view.Outvoted {
		c.log.Debug("view cross-check undecided", "supernode", primary.server.ShortString(), "its_home", shortIDs(primary.home),
			"others_home", shortIDs(majority(ops)), "opinions", len(ops))
		return
	}
	c.distrusted[primary.server] = c.cfg.Now().Add(distrust)
	c.log.Warn("supernode's directory view outvoted: leaving it", "supernode", primary.server.ShortString(),
		"its_home", shortIDs(primary.home), "others", len(ops))
	c.cfg.Session.Distrust(primary.server, distrust, "its directory view disagrees with other supernodes'")
	// Adopt the view of the majority for the node's own key until the
	// next refresh asks another supernode for the whole view.
	best := majority(ops)
	for _, f := range answers {
		if slices.Equal(f.home, best) {
			c.cfg.Publish(f.members, f.version)
			return
		}
	}
}

// majority is the home cluster most opinions give (the first of those
// tied).
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

// checker chooses the supernode that cross-checks primary: a regular
// supernode of the view, neither primary nor in primary's home cluster,
// preferably of another subnet (an attacker's supernodes tend to share
// one), at random; else a home member other than primary.
func (c *Client) checker(primary *fetched) (peer.AddrInfo, bool) {
	snap := c.cfg.Dir.Snapshot()
	var primarySubnet string
	if e, ok := snap.Get(primary.server); ok {
		primarySubnet = cluster.Subnet(e.Addrs)
	}
	self := c.cfg.Host.ID()
	var other, same, home []peer.AddrInfo
	for _, e := range snap.Entries {
		if _, bad := c.distrusted[e.ID]; bad || e.ID == primary.server || e.ID == self || e.Role != protocol.RoleSupernode {
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
			return set[c.rng.IntN(len(set))], true
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
