package node

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/view"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// The view client's series (node/viewclient), read from the node's
// registry.

func (n *Node) viewCount(t testing.TB, purpose, result string) float64 {
	t.Helper()
	return n.metricForTest(t, "overlayd_directory_view_fetches_total", "purpose", purpose, "result", result)
}

func (n *Node) viewVerdicts(t testing.TB, v view.Verdict) float64 {
	t.Helper()
	return n.metricForTest(t, "overlayd_directory_view_checks_total", "verdict", v.String())
}

func (n *Node) viewEntriesCounted(t testing.TB, result string) float64 {
	t.Helper()
	return n.metricForTest(t, "overlayd_directory_view_entries_total", "result", result)
}

// announcementsHeard is every announcement the node's topic validator
// saw, accepted or refused for any reason.
func (n *Node) announcementsHeard(t testing.TB) float64 {
	t.Helper()
	k := n.metricForTest(t, "overlayd_directory_announcements_accepted_total")
	for _, r := range append(slices.Clone(protocol.Reasons), protocol.CertReasons...) {
		k += n.rejectedForTest(string(r))
	}
	return k
}

// TestOrdinaryNodesKeepAView: in a network of 16 supernodes, ordinary
// nodes hear no announcement (their validators count none, they are in no
// supernode's topic mesh) and hold at most a view's worth of supernodes,
// fewer than the tier; the real GossipSub messages their supernodes serve
// verify (protocol.OpenSigned), and the home cluster their ring gives is
// the one every supernode computes for their key. An honest network's
// cross-checks agree.
func TestOrdinaryNodesKeepAView(t *testing.T) {
	const tier = 16
	sns := viewTier(t, tier)
	var cs []*Node
	for range 4 {
		cs = append(cs, startClientConfig(t, viewConfig(t, config.RoleOrdinary, p2pAddr(sns[rand.IntN(tier)]))))
	}
	for _, c := range cs {
		waitFor(t, 20*time.Second, "client attached", func() bool { return c.attachmentForTest() != "" })
		waitFor(t, 20*time.Second, "three refreshes and a cross-check", func() bool {
			return c.viewCount(t, "refresh", "ok") >= 3 && c.viewVerdicts(t, view.Agree) >= 1
		})
	}
	for _, c := range cs {
		if k := c.announcementsHeard(t); k != 0 {
			t.Errorf("ordinary node %s heard %v announcements", c.ID().ShortString(), k)
		}
		if b := c.metricForTest(t, "overlayd_directory_announcement_bytes_total"); b != 0 {
			t.Errorf("ordinary node counted %v bytes of the topic", b)
		}
		if k := c.Directory().Snapshot().Len(); k == 0 || k > view.Neighbours+view.Spares || k >= tier {
			t.Errorf("ordinary node's directory holds %d supernodes; a view holds 1 to %d, fewer than the tier's %d",
				k, view.Neighbours+view.Spares, tier)
		}
		if c.viewEntriesCounted(t, "accepted") == 0 || c.viewEntriesCounted(t, string(protocol.ReasonBadSignature)) != 0 {
			t.Errorf("view entries: %v accepted, %v with bad signatures", c.viewEntriesCounted(t, "accepted"),
				c.viewEntriesCounted(t, string(protocol.ReasonBadSignature)))
		}
		if v := c.viewVerdicts(t, view.Outvoted); v != 0 {
			t.Errorf("%v cross-checks outvoted an honest supernode", v)
		}
		if v := c.Status().RingVersion; !slices.ContainsFunc(sns, func(sn *Node) bool { return sn.Ring().Version() == v }) {
			t.Errorf("client shows ring version %q, which no supernode has", v)
		}
		home := cluster.Home(c.Ring(), []byte(c.ID()))
		for _, sn := range sns {
			if want := cluster.Home(sn.Ring(), []byte(c.ID())); !slices.Equal(home, want) {
				t.Fatalf("client %s: home %v by its view, %v by supernode %s", c.ID().ShortString(), home, want, sn.ID().ShortString())
			}
		}
	}
	for _, sn := range sns {
		for _, p := range sn.dirs.PubSub().ListPeers(protocol.DirectoryTopic) {
			if byID(cs, p) != nil {
				t.Fatalf("supernode %s has ordinary node %s in its announcement topic", sn.ID().ShortString(), p.ShortString())
			}
		}
		if sn.metricForTest(t, "overlayd_directory_announcement_bytes_total") == 0 {
			t.Fatalf("supernode %s counted no bytes of the topic", sn.ID().ShortString())
		}
	}
}

// viewConfig is attachConfig with an announce interval of a second and
// keepalives of 300 ms: 16 supernodes under -race on a loaded 2-core
// machine let 300 ms announcements (900 ms of life) expire.
func viewConfig(t *testing.T, role config.Role, boot string) Config {
	c := attachConfig(t, role, boot)
	c.AnnounceInterval = time.Second
	c.Keepalive = 300 * time.Millisecond
	return c
}

// viewTier starts k supernodes of capacity 10 that know each other and
// waits (longer than supernodes does: 16 under -race beside other tests)
// until their rings agree.
func viewTier(t *testing.T, k int) []*Node {
	t.Helper()
	var sns []*Node
	boot := ""
	for range k {
		c := viewConfig(t, config.RoleSupernode, boot)
		c.Capacity = 10
		sns = append(sns, startNode(t, c))
		boot = p2pAddr(sns[0])
	}
	start := time.Now()
	t.Cleanup(func() {
		if t.Failed() {
			for _, sn := range sns {
				l := -1
				if r := sn.Ring(); r != nil {
					l = r.Len()
				}
				confirmed := 0
				for _, e := range sn.Directory().Snapshot().Entries {
					if e.ID == sn.ID() || sn.dirs.ConfirmedForTest(e.ID) {
						confirmed++
					}
				}
				t.Logf("supernode %s: ring %d, directory %d, confirmed %d", sn.ID().ShortString(), l, sn.Directory().Snapshot().Len(), confirmed)
			}
		}
	})
	waitFor(t, 60*time.Second, "supernode rings", func() bool {
		for _, sn := range sns {
			if r := sn.Ring(); r == nil || r.Len() != k {
				return false
			}
		}
		return true
	})
	t.Logf("%d supernodes' rings complete %v after the last started", k, time.Since(start).Round(time.Millisecond))
	return sns
}

// serveView replaces sn's view handler with one that answers as the real
// one would, then passes the response through tamper.
func serveView(t *testing.T, sn *Node, tamper func(req *pb.ViewRequest, resp *pb.ViewResponse)) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 1))
	sn.Host().SetStreamHandler(protocol.ViewID, func(s network.Stream) {
		defer s.Close()
		var req pb.ViewRequest
		if err := protocol.NewFrameReader(s, 1<<20).Read(&req); err != nil {
			s.Reset()
			return
		}
		have := map[peer.ID]uint64{}
		for _, h := range req.GetHave() {
			have[peer.ID(h.GetPeerId())] = h.GetSeq()
		}
		resp := view.Build(sn.Ring(), sn.Directory().Snapshot(), req.GetKeys(), have, req.GetNeighboursOnly(), rng)
		tamper(&req, resp)
		_ = protocol.WriteFrame(s, resp)
	})
}

// TestViewOmissionDetected: the supernode a client is attached to omits
// the client's other home members from the views it serves, so that the
// client would see it as the only established member of its home (an
// eclipse in the making). The cross-check with another supernode
// disagrees, the home members asked outvote it, the verdict is counted,
// and the client leaves it for an honest supernode and keeps the honest
// home.
func TestViewOmissionDetected(t *testing.T) {
	sns := supernodes(t, 8, 10)
	c := startClient(t, p2pAddr(sns[0]))
	waitFor(t, 20*time.Second, "client attached", func() bool { return c.attachmentForTest() != "" })
	liar := byID(sns, c.attachmentForTest())
	honest := cluster.Home(liar.Ring(), []byte(c.ID()))
	serveView(t, liar, func(req *pb.ViewRequest, resp *pb.ViewResponse) {
		if !slices.ContainsFunc(req.GetKeys(), func(k []byte) bool { return string(k) == string(c.ID()) }) {
			return
		}
		resp.Entries = slices.DeleteFunc(resp.Entries, func(e *pb.ViewEntry) bool {
			id := peer.ID(e.GetPeerId())
			return id != liar.ID() && slices.Contains(honest, id)
		})
	})
	waitFor(t, 20*time.Second, "the liar outvoted", func() bool { return c.viewVerdicts(t, view.Outvoted) >= 1 })
	waitFor(t, 20*time.Second, "client moved to an honest supernode", func() bool {
		a := c.attachmentForTest()
		return a != "" && a != liar.ID()
	})
	waitFor(t, 10*time.Second, "client's home is the honest one", func() bool {
		return slices.Equal(cluster.Home(c.Ring(), []byte(c.ID())), honest)
	})
	t.Logf("outvoted %v times; moved from %s to %s; checks: %v agree, %v undecided", c.viewVerdicts(t, view.Outvoted),
		liar.ID().ShortString(), c.attachmentForTest().ShortString(), c.viewVerdicts(t, view.Agree), c.viewVerdicts(t, view.Undecided))
}

// TestTierIntervalFollowsDirectory: a supernode whose directory holds 150
// supernodes announces every 1.5 s instead of its configured 300 ms
// (protocol.AnnounceInterval: 100 announcements a second for the tier),
// and its receivers' limits follow, so the entry lives 3 such intervals.
func TestTierIntervalFollowsDirectory(t *testing.T) {
	sn := startNode(t, attachConfig(t, config.RoleSupernode, ""))
	other := startNode(t, attachConfig(t, config.RoleSupernode, p2pAddr(sn)))
	waitFor(t, 10*time.Second, "the two supernodes know each other", func() bool {
		return hasAll(sn, []peer.ID{other.ID()}) && hasAll(other, []peer.ID{sn.ID()})
	})
	now := time.Now()
	for i := range 149 {
		id := newIDForTest(t)
		a := protocol.Announcement{ID: id, Addrs: sn.Host().Addrs(), Role: protocol.RoleSupernode, Capacity: 10,
			Version: protocol.Version, Seq: uint64(i + 1), Interval: 10 * time.Minute, Issued: now}
		for _, n := range []*Node{sn, other} {
			if _, err := n.Directory().Apply(id, a, now); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := protocol.AnnounceInterval(300*time.Millisecond, 151)
	if want <= 300*time.Millisecond {
		t.Fatalf("a tier of %d does not stretch the interval", sn.Directory().Snapshot().Len())
	}
	waitFor(t, 10*time.Second, "announcer at the tier's interval", func() bool { return sn.announcer.Interval() == want })
	// other hears sn's announcement with the stretched interval, and does
	// not clamp it to twice its own configured 300 ms.
	waitFor(t, 20*time.Second, "entry with the stretched interval", func() bool {
		e, ok := other.Directory().Snapshot().Get(sn.ID())
		return ok && e.Interval == want && e.Expires.Sub(e.LastSeen) > protocol.MissedAnnouncements*protocol.MaxIntervalFactor*300*time.Millisecond
	})
}

// TestViewThroughOrdinaryBootstrap: a node that joins through an ordinary
// node (its only bootstrap peer, as an mDNS neighbour may be) gets a hint
// from it (that node's own view, signed entries without a ring), asks a
// supernode named there for its view, and attaches.
func TestViewThroughOrdinaryBootstrap(t *testing.T) {
	sns := supernodes(t, 3, 10)
	a := startClient(t, p2pAddr(sns[0]))
	waitFor(t, 20*time.Second, "first client attached", func() bool { return a.attachmentForTest() != "" })
	b := startClient(t, p2pAddr(a))
	waitFor(t, 20*time.Second, "client joined through an ordinary node attached", func() bool { return b.attachmentForTest() != "" })
	if home, want := cluster.Home(b.Ring(), []byte(b.ID())), cluster.Home(sns[0].Ring(), []byte(b.ID())); !slices.Equal(home, want) {
		t.Fatalf("home %v, a supernode's %v", home, want)
	}
}

// TestViewFromPeerFoundWithoutBootstrap: an ordinary node with no
// bootstrap peers that is connected to a supernode (as mDNS connects the
// peers it finds on a LAN) asks it for a view and attaches (found by
// cmd/overlayd TestMDNSLANDaemonsFindEachOther: the view client asked only the
// attached supernode, bootstrap peers and the view's entries).
func TestViewFromPeerFoundWithoutBootstrap(t *testing.T) {
	sn := startNode(t, attachConfig(t, config.RoleSupernode, ""))
	c := attachConfig(t, config.RoleOrdinary, "")
	c.MDNS = false // the test connects the peers itself, as mDNS would
	o := startClientConfig(t, c)
	if err := o.Host().Connect(context.Background(), peer.AddrInfo{ID: sn.ID(), Addrs: sn.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "ordinary node attached to the supernode it is connected to", func() bool {
		return o.attachmentForTest() == sn.ID()
	})
}
