package viewclient

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/overlay/view"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// TestRefreshAdoptsTheServersView: a refresh asks the supernode the node
// is attached to, keeps only the view's entries (each signature checked
// and accepted), builds a ring whose home cluster for the node's key is
// the tier's, reports the server's ring version, and an honest tier's
// cross-check agrees.
func TestRefreshAdoptsTheServersView(t *testing.T) {
	net := newTier(t, 16, 10)
	v := newViewer(t, net, net.sns[3], nil)
	v.mustRefresh(t)
	key := []byte(v.h.ID())
	if got, want := v.home(), cluster.Home(net.r, key); !slices.Equal(got, want) {
		t.Fatalf("home %v by the view, %v by the tier", got, want)
	}
	if got := v.Version(); got != net.r.Version() {
		t.Fatalf("version %q, the tier's ring is %q", got, net.r.Version())
	}
	if net.sns[3].asked.Load() == 0 {
		t.Fatal("the supernode the node is attached to was not asked")
	}
	if k := v.dir.Snapshot().Len(); k == 0 || k > view.Neighbours+view.Spares || k >= len(net.sns) {
		t.Fatalf("directory holds %d supernodes; a view holds 1 to %d, fewer than the tier's %d", k, view.Neighbours+view.Spares, len(net.sns))
	}
	if v.entries("accepted") == 0 || v.entries(string(protocol.ReasonBadSignature)) != 0 {
		t.Fatalf("entries: %v accepted, %v with bad signatures", v.entries("accepted"), v.entries(string(protocol.ReasonBadSignature)))
	}
	if v.verdicts(view.Agree) != 1 || v.verdicts(view.Outvoted) != 0 || v.verdicts(view.Undecided) != 0 {
		t.Fatalf("checks: %v agree, %v outvoted, %v undecided; want one agreeing", v.verdicts(view.Agree),
			v.verdicts(view.Outvoted), v.verdicts(view.Undecided))
	}
	// A second refresh (its spares sampled anew) keeps the home.
	v.mustRefresh(t)
	if got, want := v.home(), cluster.Home(net.r, key); !slices.Equal(got, want) {
		t.Fatalf("home %v by the second view, %v by the tier", got, want)
	}
	if got := v.fetches(purposeRefresh, "ok"); got != 2 {
		t.Fatalf("%v refreshes counted, want 2", got)
	}
	// Adopting a view of the members the ring has publishes no ring.
	pubs := v.pubs.Load()
	v.adopt(&fetched{server: net.sns[3].h.ID(), members: v.rings.Load().Members(), version: "same members"})
	if v.pubs.Load() != pubs || v.Version() != "same members" {
		t.Fatalf("a view of the same members: %d rings published, version %q", v.pubs.Load()-pubs, v.Version())
	}
}

// TestOmissionOutvoted: the supernode the node is attached to omits the
// node's other home members from the views it serves, so that the node
// would see it as the only member of its home it knows (an eclipse in the
// making). The cross-check disagrees, the home members asked outvote it,
// the node leaves it (Session.Distrust), adopts the majority's ring, and
// asks it for no view until the distrust ends.
func TestOmissionOutvoted(t *testing.T) {
	net := newTier(t, 8, 10)
	var v *viewer
	var liar *supernode
	var honest []peer.ID
	// A liar outside the node's home: it omits all of them.
	for _, sn := range net.sns {
		v = newViewer(t, net, sn, nil)
		honest = cluster.Home(net.r, []byte(v.h.ID()))
		if !slices.Contains(honest, sn.h.ID()) {
			liar = sn
			break
		}
	}
	if liar == nil {
		t.Fatal("no supernode outside the node's home")
	}
	liar.setTamper(func(req *pb.ViewRequest, resp *pb.ViewResponse) {
		if !slices.ContainsFunc(req.GetKeys(), func(k []byte) bool { return string(k) == string(v.h.ID()) }) {
			return
		}
		resp.Entries = slices.DeleteFunc(resp.Entries, func(e *pb.ViewEntry) bool {
			return slices.Contains(honest, peer.ID(e.GetPeerId()))
		})
	})
	v.mustRefresh(t)
	if v.verdicts(view.Outvoted) != 1 {
		t.Fatalf("checks: %v outvoted, %v agree, %v undecided; want the liar outvoted", v.verdicts(view.Outvoted),
			v.verdicts(view.Agree), v.verdicts(view.Undecided))
	}
	if d := v.s.distrustedNow(); !slices.Equal(d, []peer.ID{liar.h.ID()}) {
		t.Fatalf("distrusted %v, want the liar %s", d, liar.h.ID().ShortString())
	}
	if got := v.home(); !slices.Equal(got, honest) {
		t.Fatalf("home %v after the check, want the honest %v", got, honest)
	}
	// The liar is asked no more, even by a node that is still attached
	// to it.
	v.s.mu.Lock()
	v.s.sn = liar.h.ID()
	v.s.mu.Unlock()
	asked := liar.asked.Load()
	v.mustRefresh(t)
	if liar.asked.Load() != asked {
		t.Fatal("the outvoted supernode was asked for a view")
	}
	if got := v.home(); !slices.Equal(got, honest) {
		t.Fatalf("home %v after the next refresh, want the honest %v", got, honest)
	}
}

// TestViewRampNotDistrusted: the supernode a node is attached to holds
// every member but gives some of them other ring weights and a ring
// version of its own, as an honest supernode does while it ramps a
// newcomer's weight (honest supernodes' rings differ so for a whole ramp
// period). The node's home then differs from the checker's at every
// refresh, and after strikes refreshes the home members are asked, again
// and again, but weights alone never outvote: the node stays with its
// supernode.
func TestViewRampNotDistrusted(t *testing.T) {
	net := newTier(t, 8, 800) // ring weight 8 each
	sn := net.sns[0]
	v := newViewer(t, net, sn, nil)
	key := []byte(v.h.ID())
	honest := cluster.Home(net.r, key)
	// Lower some members' weights to 1 (a ramp's first step), choosing
	// the ones whose lowering moves the node's home: the home members
	// first, then each other supernode alone (which lowering moves the
	// home depends on the random identities).
	var lowered []peer.ID
	tries := [][]peer.ID{honest[:1], honest[1:2], honest[2:], honest, net.ids()}
	for _, p := range net.ids() {
		tries = append(tries, []peer.ID{p})
	}
	for _, try := range tries {
		try = slices.DeleteFunc(slices.Clone(try), func(p peer.ID) bool { return p == sn.h.ID() })
		var ms []ring.Member
		for _, m := range net.r.Members() {
			if slices.ContainsFunc(try, func(p peer.ID) bool { return p.String() == m.ID }) {
				m.Weight = 1
			}
			ms = append(ms, m)
		}
		if h := view.Home(ms, key); len(try) > 0 && !slices.Equal(h, honest) {
			lowered = try
			break
		}
	}
	if lowered == nil {
		t.Fatalf("no choice of lowered weights moves the home %v", honest)
	}
	sn.setTamper(func(_ *pb.ViewRequest, resp *pb.ViewResponse) {
		resp.RingVersion = "ramping-" + resp.RingVersion
		for _, e := range resp.Entries {
			if e.GetWeight() > 0 && slices.Contains(lowered, peer.ID(e.GetPeerId())) {
				e.Weight = 1
			}
		}
	})
	// strikes undecided checks lead to one judgement (counted as
	// undecided too); two rounds of them ask the home members twice.
	for range 2 * strikes {
		v.mustRefresh(t)
	}
	if n := v.verdicts(view.Outvoted); n != 0 {
		t.Fatalf("a view that differs by weights alone was outvoted %v times", n)
	}
	if n := v.verdicts(view.Undecided); n != 2*strikes {
		t.Fatalf("%v checks undecided, want %d", n, 2*strikes)
	}
	if d := v.s.distrustedNow(); len(d) != 0 {
		t.Fatalf("the node distrusted %v", d)
	}
	// One checker a refresh, and the home members at each judgement.
	if n := v.fetches(purposeCheck, "ok"); n < 2*strikes+2 {
		t.Fatalf("%v check fetches: the home members were not asked at both judgements", n)
	}
	if v.Version() != "ramping-"+net.r.Version() {
		t.Fatalf("version %q, the server's is %q", v.Version(), "ramping-"+net.r.Version())
	}
}

// TestViewForgedEntryRefused: a supernode that alters an entry it serves
// (raises another supernode's capacity, which would draw clients there)
// cannot make the signature verify: the node refuses the entry, counts it
// as bad_signature, and keeps what that supernode announced.
func TestViewForgedEntryRefused(t *testing.T) {
	net := newTier(t, 4, 10)
	forger := net.sns[0]
	v := newViewer(t, net, forger, nil)
	var mu sync.Mutex
	victims := map[peer.ID]bool{}
	forger.setTamper(func(_ *pb.ViewRequest, resp *pb.ViewResponse) {
		for _, e := range resp.Entries {
			if peer.ID(e.GetPeerId()) == forger.h.ID() || len(e.Signed) == 0 {
				continue
			}
			mu.Lock()
			victims[peer.ID(e.GetPeerId())] = true
			mu.Unlock()
			e.Signed = forgeSigned(t, e.Signed, func(a *protocol.Announcement) { a.Capacity = 1_000_000 })
			return
		}
	})
	v.mustRefresh(t)
	if v.entries(string(protocol.ReasonBadSignature)) < 1 {
		t.Fatal("the forged entry was not counted")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(victims) == 0 {
		t.Fatal("the forger served no other supernode's entry")
	}
	for p := range victims {
		if e, ok := v.dir.Snapshot().Get(p); ok && e.Capacity != 10 {
			t.Fatalf("the node holds capacity %d for %s, which announced 10", e.Capacity, p.ShortString())
		}
	}
}

// TestServersOrder: the supernodes a refresh asks, in order: the one the
// node is attached to, connected bootstrap peers, the view's supernodes,
// connected peers that speak the view protocol, the other bootstrap
// peers; never a distrusted one nor the node itself, at most
// serversPerRefresh.
func TestServersOrder(t *testing.T) {
	net := newTier(t, 2, 10)
	attached := net.sns[0].h
	view0 := net.sns[1].h // the one supernode of the view
	bootOn := net.addHost(t, nil)
	bootOff := net.addHost(t, nil)
	speaker := net.addHost(t, nil)
	speaker.SetStreamHandler(protocol.ViewID, func(s network.Stream) { s.Reset() })
	mute := net.addHost(t, nil) // connected, without the view protocol
	boot := []peer.AddrInfo{{ID: bootOff.ID()}, {ID: bootOn.ID()}}
	v := newViewer(t, net, nil, boot)
	for _, p := range []peer.ID{bootOn.ID(), speaker.ID(), mute.ID()} {
		if _, err := net.mn.ConnectPeers(v.h.ID(), p); err != nil {
			t.Fatal(err)
		}
	}
	// identify tells the node which protocols speaker speaks.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ps, _ := v.h.Peerstore().SupportsProtocols(speaker.ID(), protocol.ViewID)
		if len(ps) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("identify did not tell the speaker's protocols")
		}
		time.Sleep(10 * time.Millisecond) // polling identify's result, with a deadline
	}
	e, _ := net.dir.Snapshot().Get(view0.ID())
	if _, err := v.dir.Apply(view0.ID(), protocol.Announcement{ID: view0.ID(), Addrs: e.Addrs, Role: protocol.RoleSupernode,
		Capacity: 10, Version: protocol.Version, Seq: 1, Interval: 10 * time.Second, Issued: t0}, t0); err != nil {
		t.Fatal(err)
	}
	ids := func(ais []peer.AddrInfo) []peer.ID {
		var out []peer.ID
		for _, ai := range ais {
			out = append(out, ai.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		attached   peer.ID
		distrusted []peer.ID
		want       []peer.ID
	}{
		{name: "not attached", want: []peer.ID{bootOn.ID(), view0.ID(), speaker.ID(), bootOff.ID()}},
		{name: "attached first, at most four", attached: attached.ID(), want: []peer.ID{attached.ID(), bootOn.ID(), view0.ID(), speaker.ID()}},
		{name: "distrusted skipped", attached: attached.ID(), distrusted: []peer.ID{attached.ID(), view0.ID()},
			want: []peer.ID{bootOn.ID(), speaker.ID(), bootOff.ID()}},
		{name: "itself skipped", attached: v.h.ID(), distrusted: []peer.ID{bootOn.ID()},
			want: []peer.ID{view0.ID(), speaker.ID(), bootOff.ID()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v.s.mu.Lock()
			v.s.sn = tc.attached
			v.s.mu.Unlock()
			clear(v.distrusted)
			for _, p := range tc.distrusted {
				v.distrusted[p] = t0.Add(time.Minute)
			}
			if got := ids(v.servers()); !slices.Equal(got, tc.want) {
				t.Fatalf("servers %v, want %v", got, tc.want)
			}
		})
	}
}

// TestGroupKeysInMoreRequests: a node in more groups than one request
// carries keys for asks for the rest in further requests, for their
// neighbourhoods only, and its ring holds the homes of all its keys.
func TestGroupKeysInMoreRequests(t *testing.T) {
	net := newTier(t, 16, 10)
	sn := net.sns[0]
	v := newViewer(t, net, sn, nil)
	for i := range protocol.MaxViewKeys + 2 {
		v.s.groups = append(v.s.groups, "group-"+string(rune('a'+i)))
	}
	v.mustRefresh(t)
	sn.mu.Lock()
	reqs := slices.Clone(sn.reqs)
	sn.mu.Unlock()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	if len(reqs[0].GetKeys()) != protocol.MaxViewKeys || reqs[0].GetNeighboursOnly() {
		t.Fatalf("first request: %d keys, neighbours only %v", len(reqs[0].GetKeys()), reqs[0].GetNeighboursOnly())
	}
	if len(reqs[1].GetKeys()) != 3 || !reqs[1].GetNeighboursOnly() {
		t.Fatalf("second request: %d keys, neighbours only %v", len(reqs[1].GetKeys()), reqs[1].GetNeighboursOnly())
	}
	ms := v.rings.Load().Members()
	for _, g := range v.s.groups {
		for _, p := range cluster.Home(net.r, []byte(g)) {
			if !slices.ContainsFunc(ms, func(m ring.Member) bool { return m.ID == p.String() }) {
				t.Fatalf("group %s: home member %s not on the node's ring", g, p.ShortString())
			}
		}
	}
}

// TestInterval: the wait between refreshes is the shortest announce
// interval among the view's entries, at least the node's own.
func TestInterval(t *testing.T) {
	for _, tc := range []struct {
		name      string
		own       time.Duration
		intervals []time.Duration
		want      time.Duration
	}{
		{name: "empty view", own: time.Second, want: time.Second},
		{name: "shortest entry", own: time.Second, intervals: []time.Duration{10 * time.Second, 3 * time.Second}, want: 3 * time.Second},
		{name: "at least its own", own: 5 * time.Second, intervals: []time.Duration{10 * time.Second, 3 * time.Second}, want: 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := directory.New()
			for i, iv := range tc.intervals {
				id := newPeerID(t)
				if _, err := dir.Apply(id, protocol.Announcement{ID: id, Role: protocol.RoleSupernode, Capacity: 10,
					Version: protocol.Version, Seq: uint64(i + 1), Interval: iv, Issued: t0}, t0); err != nil {
					t.Fatal(err)
				}
			}
			c := &Client{cfg: Config{Dir: dir, AnnounceInterval: tc.own}}
			if got := c.interval(); got != tc.want {
				t.Fatalf("interval %v, want %v", got, tc.want)
			}
		})
	}
}

func newPeerID(t testing.TB) peer.ID {
	t.Helper()
	priv, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestMajority: the home most opinions give; the first of those tied.
func TestMajority(t *testing.T) {
	a, b, c := newPeerID(t), newPeerID(t), newPeerID(t)
	x, y := []peer.ID{a, b}, []peer.ID{b, c}
	for _, tc := range []struct {
		name string
		ops  []view.Opinion
		want []peer.ID
	}{
		{name: "none"},
		{name: "one", ops: []view.Opinion{{Home: x}}, want: x},
		{name: "two to one", ops: []view.Opinion{{Home: x}, {Home: y}, {Home: y}}, want: y},
		{name: "tie: the first", ops: []view.Opinion{{Home: y}, {Home: x}}, want: y},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := majority(tc.ops); !slices.Equal(got, tc.want) {
				t.Fatalf("majority %v, want %v", got, tc.want)
			}
		})
	}
	if got := union(x, y); !slices.Equal(got, []peer.ID{a, b, c}) {
		t.Fatalf("union %v", got)
	}
}

// TestRunRefreshesWhenKicked: Run refreshes at once, again when kicked
// (long before its interval), retries sooner after a refresh no
// supernode answered, and returns when its context ends.
func TestRunRefreshesWhenKicked(t *testing.T) {
	net := newTier(t, 4, 10)
	v := newViewer(t, net, net.sns[0], nil)
	v.cfg.AnnounceInterval = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); v.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "the first refresh", func() bool { return v.fetches(purposeRefresh, "ok") >= 1 })
	v.Kick()
	waitFor(t, "a refresh after the kick", func() bool { return v.fetches(purposeRefresh, "ok") >= 2 })
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return when its context ended")
	}
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling an event counter, with a deadline
	}
}

// TestNewNeedsConfig: New refuses a Config without a required field.
func TestNewNeedsConfig(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	full := Config{Host: newTier(t, 1, 10).sns[0].h, Dir: directory.New(), Rings: &ring.Published{},
		Publish: func([]ring.Member, string) {}, Session: &session{}, AnnounceInterval: time.Second,
		Now: time.Now, Rand: rand.New(rand.NewPCG(1, 1)), Log: slog.New(slog.DiscardHandler), Metrics: m}
	if _, err := New(full); err != nil {
		t.Fatalf("full config: %v", err)
	}
	for name, f := range map[string]func(c *Config){
		"no host":     func(c *Config) { c.Host = nil },
		"no publish":  func(c *Config) { c.Publish = nil },
		"no session":  func(c *Config) { c.Session = nil },
		"no metrics":  func(c *Config) { c.Metrics = nil },
		"no interval": func(c *Config) { c.AnnounceInterval = 0 },
	} {
		c := full
		f(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := NewMetrics(nil); err == nil {
		t.Error("NewMetrics accepted no registerer")
	}
}
