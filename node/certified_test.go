package node

import (
	"context"
	"slices"
	"testing"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
)

// snRawForTest returns the supernode certificate this node announces.
func (n *Node) snRawForTest() []byte {
	return n.trust.SignedSupernodeCert()
}

// supernodeAnnouncement is a supernode announcement of the rogue itself
// (so the GossipSub signature is valid) with capacity and cert.
func (r *rogue) supernodeAnnouncement(t *testing.T, capacity uint32, cert []byte, seq uint64) []byte {
	t.Helper()
	a := protocol.Announcement{ID: r.h.ID(), Addrs: []ma.Multiaddr{r.h.Addrs()[0]}, Role: protocol.RoleSupernode,
		Capacity: capacity, Version: protocol.Version, Seq: seq, Interval: time.Second, MegaCert: cert}
	b, err := a.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// certifiedNetwork starts k certified supernodes of capacity, waits until
// their rings hold the k, then starts a client, all trusting op, and
// waits until its ring holds the k too. The client starts after the
// supernodes' rings are complete: an ordinary node plans its first
// attach on its first view without waiting for it to settle, so a view
// served from a ring still forming can make it attach elsewhere than its
// home's first member (reported with issue 21's tests).
func certifiedNetwork(t *testing.T, op operator, k, capacity int) (sns []*Node, client *Node) {
	t.Helper()
	boot := ""
	for range k {
		sn := trustingSupernode(t, op, boot, capacity, nil)
		if boot == "" {
			boot = p2pAddr(sn)
		}
		sns = append(sns, sn)
	}
	waitFor(t, 10*time.Second, "certified supernodes' rings", func() bool {
		for _, n := range sns {
			if r := n.Ring(); r == nil || r.Len() != k {
				return false
			}
		}
		return true
	})
	client = trustingClient(t, op, boot, func(c *Config) { c.Capacity = 0 })
	waitFor(t, 10*time.Second, "certified rings", func() bool {
		for _, n := range append([]*Node{client}, sns...) {
			if r := n.Ring(); r == nil || r.Len() != k {
				return false
			}
		}
		return true
	})
	return sns, client
}

// refusedBy returns a condition that holds once every node counted one
// more refusal for reason than now.
func refusedBy(nodes []*Node, reason protocol.Reason) func() bool {
	before := make([]float64, len(nodes))
	for i, n := range nodes {
		before[i] = n.rejectedForTest(string(reason))
	}
	return func() bool {
		for i, n := range nodes {
			if n.rejectedForTest(string(reason)) <= before[i] {
				return false
			}
		}
		return true
	}
}

// TestCertifiedRefusesUncertifiedSupernodes: in a certified network,
// supernode announcements without a valid certificate of their own are
// refused and counted by every node that hears the directory topic (the
// supernodes, and an auto node that does not serve), and so never reach
// an ordinary node, whose view is served from a supernode's directory
// (issue 21): no directory and no ring changes.
func TestCertifiedRefusesUncertifiedSupernodes(t *testing.T) {
	op := newOperator(t)
	sns, client := certifiedNetwork(t, op, 3, 10)
	hearer := trustingHearer(t, op, p2pAddr(sns[0]))
	waitFor(t, 10*time.Second, "hearer's ring", func() bool { r := hearer.Ring(); return r != nil && r.Len() == len(sns) })
	hearers := append([]*Node{hearer}, sns...)
	all := append([]*Node{client}, hearers...)
	ringBefore := map[*Node][]ring.Member{}
	for _, n := range all {
		ringBefore[n] = n.Ring().Members()
	}

	// Fake supernodes: valid GossipSub signatures, huge capacity, and no
	// certificate, a self-signed one, or a real supernode's.
	stolen := sns[0].snRawForTest()
	var fakes []*rogue
	for i, tc := range []struct {
		what   string
		cert   func(r *rogue) []byte
		reason protocol.Reason
	}{
		{"no certificate", func(*rogue) []byte { return nil }, protocol.ReasonUncertified},
		{"no certificate (second identity)", func(*rogue) []byte { return nil }, protocol.ReasonUncertified},
		{"self-signed certificate", func(r *rogue) []byte {
			now := time.Now()
			b, err := protocol.SealSupernodeCert(protocol.SupernodeCert{Subject: r.h.ID(), Capacity: 1 << 20, NotBefore: now, NotAfter: now.Add(time.Hour), Serial: 9}, r.h.Peerstore().PrivKey(r.h.ID()))
			if err != nil {
				t.Fatal(err)
			}
			return b
		}, protocol.CertSelfSigned},
		{"another supernode's certificate", func(*rogue) []byte { return stolen }, protocol.CertWrongSubject},
		{"a mega certificate", func(r *rogue) []byte { return op.cert(t, r.h.ID(), 1<<20, 77) }, protocol.CertWrongRole},
	} {
		r := newRogue(t, all...)
		fakes = append(fakes, r)
		msg := r.supernodeAnnouncement(t, 1_000_000, tc.cert(r), uint64(100+i))
		r.publishUntil(t, tc.what+": refused by every node that hears the topic", func(int) []byte { return msg }, refusedBy(hearers, tc.reason))
	}
	// The client's view is refreshed from a supernode's directory after
	// the attack.
	afterViewRefreshes(t, client, 2, 10*time.Second)
	for _, n := range all {
		snap := n.Directory().Snapshot()
		for _, r := range fakes {
			if _, ok := snap.Get(r.h.ID()); ok {
				t.Fatalf("%s: fake supernode %s in the directory", n.ID().ShortString(), r.h.ID().ShortString())
			}
		}
		if got := n.Ring().Members(); !slices.Equal(got, ringBefore[n]) {
			t.Fatalf("%s: ring changed from %v to %v", n.ID().ShortString(), ringBefore[n], got)
		}
	}
	if got := hearer.metricForTest(t, "overlayd_directory_certificates_rejected_total", "reason", string(protocol.CertWrongSubject)); got < 1 {
		t.Fatalf("certificate refusals not counted: %v", got)
	}

	// Certified supernodes serve clients as before: the client is home.
	home := cluster.Home(client.Ring(), []byte(client.ID()))
	waitFor(t, 10*time.Second, "client attached at home", func() bool { return client.attachmentForTest() == home[0] })
}

// TestCertifiedCapacityClampedToCeiling: a supernode's capacity is
// clamped to its certificate's ceiling by itself and by every receiver,
// and a revoked certificate drops its supernode. The receivers are the
// nodes that hear the directory topic (a supernode, and an auto node that
// does not serve), which refuse the revoked certificate and count it, and
// an ordinary node, which gets the clamped entry and the ring weights in
// its view (issue 21) and loses the entry with the next views.
func TestCertifiedCapacityClampedToCeiling(t *testing.T) {
	op := newOperator(t)
	sns, client := certifiedNetwork(t, op, 2, 10)
	hearer := trustingHearer(t, op, p2pAddr(sns[0]))
	receivers := []*Node{client, hearer, sns[0]}
	// A supernode configured above its certificate's ceiling takes the
	// ceiling, and its peers record the ceiling.
	key, id := newKey(t)
	c := attachConfig(t, config.RoleSupernode, p2pAddr(sns[0]))
	c.Capacity = 500
	c.OperatorPubkeys = []string{op.pub}
	c.SupernodeCert = op.snCertFile(t, id, 4)
	big := startClientConfig(t, c, WithIdentity(key))
	if got := big.sems.Attached.Max(); got != 4 {
		t.Fatalf("own admission capacity %d, want the ceiling 4", got)
	}
	for _, n := range receivers {
		waitFor(t, 10*time.Second, "clamped entry on "+n.ID().ShortString(), func() bool {
			e, ok := n.Directory().Snapshot().Get(id)
			return ok && e.Capacity == 4 && e.SupernodeCert != nil
		})
	}

	// A peer that announces more than its certificate allows (a modified
	// node) is clamped by every receiver, and so weighs its ceiling on
	// the ring.
	r := newRogue(t, hearer, sns[0])
	cert := op.snCert(t, r.h.ID(), 7, 4242)
	var seq uint64
	r.publishUntil(t, "liar clamped", func(int) []byte { seq++; return r.supernodeAnnouncement(t, 1_000_000, cert, seq) }, func() bool {
		for _, n := range receivers {
			if e, ok := n.Directory().Snapshot().Get(r.h.ID()); !ok || e.Capacity != 7 {
				return false
			}
		}
		return true
	})
	for _, n := range receivers {
		waitFor(t, 10*time.Second, "liar on the ring with the weight of its ceiling on "+n.ID().ShortString(), func() bool {
			return slices.Contains(n.Ring().Members(), ring.Member{ID: r.h.ID().String(), Weight: cluster.Weight(7)})
		})
	}

	// Revoking the certificate drops the entry everywhere it was.
	raw, err := protocol.SealRevocation(4242, time.Now(), time.Now().Add(time.Hour), op.key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sns[0].Revoke(context.Background(), raw); err != nil {
		t.Fatal(err)
	}
	for _, n := range receivers {
		waitFor(t, 10*time.Second, "revoked supernode gone from "+n.ID().ShortString(), func() bool {
			_, ok := n.Directory().Snapshot().Get(r.h.ID())
			return !ok
		})
	}
	hearers := []*Node{hearer, sns[0]}
	r.publishUntil(t, "revoked certificate refused by every node that hears the topic",
		func(int) []byte { seq++; return r.supernodeAnnouncement(t, 5, cert, seq) }, refusedBy(hearers, protocol.CertRevoked))
	// ... and so not served back to the ordinary node in a view.
	afterViewRefreshes(t, client, 2, 10*time.Second)
	for _, n := range receivers {
		if _, ok := n.Directory().Snapshot().Get(r.h.ID()); ok {
			t.Fatalf("%s: revoked supernode back in the directory", n.ID().ShortString())
		}
	}
}

func TestPromoteWithSupernodeCert(t *testing.T) {
	op := newOperator(t)
	sns, client := certifiedNetwork(t, op, 1, 10)
	// A supernode started without a certificate is refused...
	c := attachConfig(t, config.RoleSupernode, p2pAddr(sns[0]))
	c.OperatorPubkeys = []string{op.pub}
	bare := startNode(t, c)
	// (its own validator is the first to refuse: the announcement is
	// never sent)
	waitFor(t, 10*time.Second, "uncertified announcement refused", func() bool { return bare.rejectedForTest(string(protocol.ReasonUncertified)) >= 1 })
	for _, n := range []*Node{sns[0], client} {
		if _, ok := n.Directory().Snapshot().Get(bare.ID()); ok {
			t.Fatal("uncertified supernode in the directory")
		}
	}
	// ... a mega certificate's wrong-role check does not get in the way...
	if _, err := bare.Promote(context.Background(), op.snCert(t, sns[0].ID(), 10, 5)); protocol.ReasonOf(err) != protocol.CertWrongSubject {
		t.Fatalf("another peer's supernode certificate: %v", err)
	}
	// ... and joins once it is given one at runtime.
	got, err := bare.Promote(context.Background(), op.snCert(t, bare.ID(), 3, 6))
	if err != nil || got.Capacity != 3 {
		t.Fatalf("promote with a supernode certificate: %+v %v", got, err)
	}
	waitFor(t, 10*time.Second, "certified at runtime", func() bool {
		e, ok := client.Directory().Snapshot().Get(bare.ID())
		return ok && e.Capacity == 3 && e.Role == protocol.RoleSupernode
	})
	if _, err := client.Promote(context.Background(), op.snCert(t, client.ID(), 3, 7)); err == nil {
		t.Fatal("an ordinary node took a supernode certificate")
	}
}
