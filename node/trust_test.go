package node

import (
	"context"
	"crypto/rand"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/protocol"
)

// operator is a test operator key and its public form for configs.
type operator struct {
	key crypto.PrivKey
	pub string
}

func newOperator(t *testing.T) operator {
	t.Helper()
	k, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := protocol.EncodeKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return operator{key: k, pub: s}
}

func (o operator) cert(t *testing.T, id peer.ID, capacity uint32, serial uint64) []byte {
	t.Helper()
	now := time.Now()
	b, err := protocol.SealMegaCert(protocol.MegaCert{Subject: id, Capacity: capacity, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), Serial: serial}, o.key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// snCert returns a supernode certificate of op for id with ceiling.
func (o operator) snCert(t *testing.T, id peer.ID, ceiling uint32, serial uint64) []byte {
	t.Helper()
	now := time.Now()
	b, err := protocol.SealSupernodeCert(protocol.SupernodeCert{Subject: id, Capacity: ceiling, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), Serial: serial}, o.key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// snCertFile writes a supernode certificate for id in its text form to a
// file for --supernode-cert, and returns its path.
func (o operator) snCertFile(t *testing.T, id peer.ID, ceiling uint32) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "supernode.cert")
	if err := os.WriteFile(path, []byte(protocol.EncodeBlob(o.snCert(t, id, ceiling, protocol.NewSerial()))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// trustingSupernode starts a regular supernode that trusts op, in a
// certified network: op has given it a supernode certificate with its
// capacity as the ceiling (tweak may change the config afterwards).
func trustingSupernode(t *testing.T, op operator, boot string, capacity int, tweak func(*Config)) *Node {
	t.Helper()
	key, id := newKey(t)
	c := attachConfig(t, config.RoleSupernode, boot)
	c.Capacity = capacity
	c.OperatorPubkeys = []string{op.pub}
	c.SupernodeCert = op.snCertFile(t, id, uint32(capacity))
	if tweak != nil {
		tweak(&c)
	}
	return startClientConfig(t, c, WithIdentity(key))
}

func trustingClient(t *testing.T, op operator, boot string, tweak func(*Config)) *Node {
	t.Helper()
	c := attachConfig(t, config.RoleOrdinary, boot)
	c.OperatorPubkeys = []string{op.pub}
	if tweak != nil {
		tweak(&c)
	}
	return startClientConfig(t, c)
}

// trustingHearer starts a node that trusts op and hears the directory
// topic without ever serving (hearerConfig).
func trustingHearer(t *testing.T, op operator, boot string) *Node {
	t.Helper()
	c := hearerConfig(t, boot)
	c.OperatorPubkeys = []string{op.pub}
	return startClientConfig(t, c)
}

func roleIn(n *Node, id peer.ID) protocol.Role {
	e, ok := n.Directory().Snapshot().Get(id)
	if !ok {
		return 0
	}
	return e.Role
}

func TestRuntimePromotionKeepsClients(t *testing.T) {
	op := newOperator(t)
	sn := trustingSupernode(t, op, "", 5, nil)
	boot := p2pAddr(sn)
	other := trustingSupernode(t, op, boot, 5, nil)
	var clients []*Node
	for range 3 {
		clients = append(clients, trustingClient(t, op, boot, func(c *Config) { c.Capacity = 0 }))
	}
	waitFor(t, 10*time.Second, "clients attached", func() bool {
		for _, c := range clients {
			if c.attachmentForTest() == "" {
				return false
			}
		}
		return true
	})
	before := map[*Node]peer.ID{}
	for _, c := range clients {
		before[c] = c.attachmentForTest()
	}
	start := time.Now()
	cert, err := sn.Promote(context.Background(), op.cert(t, sn.ID(), 100, 77))
	if err != nil {
		t.Fatal(err)
	}
	if cert.Capacity != 100 || sn.sems.Attached.Max() != 100 {
		t.Fatalf("capacity after promotion: cert %d, semaphore %d", cert.Capacity, sn.sems.Attached.Max())
	}
	if got := sn.metricForTest(t, "overlayd_node_mega_cert_not_after_seconds"); got != float64(cert.NotAfter.Unix()) {
		t.Fatalf("mega certificate expiry gauge %v, want %d", got, cert.NotAfter.Unix())
	}
	waitFor(t, sn.cfg.AnnounceInterval, "others see the mega role within one announce interval", func() bool {
		return roleIn(other, sn.ID()) == protocol.RoleMega && roleIn(clients[0], sn.ID()) == protocol.RoleMega
	})
	t.Logf("seen as mega after %v", time.Since(start))
	for _, c := range clients {
		if a, _ := c.client.Attachment(); a.Supernode != before[c] || a.Failovers != 0 {
			t.Fatalf("client moved during promotion: %+v", a)
		}
	}
	if st := sn.Status(); st.Role != "mega" || st.Mega == nil || st.Mega.Serial != 77 {
		t.Fatalf("status %+v", st)
	}
	// A certificate for someone else, or from an untrusted key, is refused.
	if _, err := other.Promote(context.Background(), op.cert(t, sn.ID(), 100, 78)); protocol.ReasonOf(err) != protocol.CertWrongSubject {
		t.Fatalf("promote with another peer's cert: %v", err)
	}
	if _, err := clients[0].Promote(context.Background(), op.cert(t, clients[0].ID(), 100, 79)); err == nil {
		t.Fatal("an ordinary node was promoted")
	}
	if err := sn.Demote(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*sn.cfg.AnnounceInterval, "demotion seen", func() bool { return roleIn(other, sn.ID()) == protocol.RoleSupernode })
}

// TestForgedMegaGetsNothing: a mega announcement with a self-signed
// certificate is refused and counted by the nodes that hear the directory
// topic (the supernode, and an auto node that does not serve), and so
// never reaches an ordinary node, whose view is served from a
// supernode's directory (issue 21): neither directory nor ring holds it.
func TestForgedMegaGetsNothing(t *testing.T) {
	op := newOperator(t)
	sn := trustingSupernode(t, op, "", 10, nil)
	target := trustingClient(t, op, p2pAddr(sn), nil)
	hearer := trustingHearer(t, op, p2pAddr(sn))
	for _, n := range []*Node{target, hearer} {
		waitFor(t, 5*time.Second, "ring", func() bool { r := n.Ring(); return r != nil && r.Len() == 1 })
	}
	r := newRogue(t, sn, hearer, target)
	// The rogue claims the mega role with a certificate it signed itself.
	self := protocol.MegaCert{Subject: r.h.ID(), Capacity: 1000, NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), Serial: 5}
	forged, err := protocol.SealMegaCert(self, r.h.Peerstore().PrivKey(r.h.ID()))
	if err != nil {
		t.Fatal(err)
	}
	a := protocol.Announcement{ID: r.h.ID(), Addrs: []ma.Multiaddr{r.h.Addrs()[0]}, Role: protocol.RoleMega,
		Capacity: 1000, Version: protocol.Version, Seq: 1, Interval: time.Second, MegaCert: forged}
	b, err := a.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	r.publishUntil(t, "forged certificate counted", func(int) []byte { return b }, func() bool {
		return sn.rejectedForTest(string(protocol.CertSelfSigned)) >= 1 && hearer.rejectedForTest(string(protocol.CertSelfSigned)) >= 1
	})
	// The ordinary node's view is refreshed from the supernode's
	// directory after the attack (a view carries up to view.MaxMegas
	// megas: a forged one the supernode held would be in it).
	afterViewRefreshes(t, target, 2, 10*time.Second)
	for _, n := range []*Node{sn, hearer, target} {
		if _, ok := n.Directory().Snapshot().Get(r.h.ID()); ok {
			t.Fatalf("%s: forged mega entered the directory", n.ID().ShortString())
		}
		if r := n.Ring(); r == nil || r.Len() != 1 {
			t.Fatalf("%s: routing changed", n.ID().ShortString())
		}
	}
}

func TestFallbackToMegasAndHandBack(t *testing.T) {
	op := newOperator(t)
	// A 1 s keepalive: this test is about where clients go, and under
	// -race on a loaded machine a 100 ms keepalive makes sessions die of
	// scheduling delays, which turns hand-back into failover.
	fast := func(c *Config) {
		c.ReturnInterval = 2 * time.Second
		c.DrainPeriod = time.Second
		c.Keepalive = time.Second
	}
	var regs []*Node
	regs = append(regs, trustingSupernode(t, op, "", 10, fast))
	boot := p2pAddr(regs[0])
	regs = append(regs, trustingSupernode(t, op, boot, 10, fast))
	var megas []*Node
	for i := range 2 {
		m := trustingSupernode(t, op, boot, 1, fast)
		if _, err := m.Promote(context.Background(), op.cert(t, m.ID(), 6, uint64(100+i))); err != nil {
			t.Fatal(err)
		}
		megas = append(megas, m)
	}
	// Every regular supernode is full.
	for _, r := range regs {
		r.sems.Attached.SetMax(0)
	}
	var clients []*Node
	dbg := &collect{}
	defer func() {
		if t.Failed() {
			for _, m := range dbg.msgs {
				t.Log(m)
			}
		}
	}()
	for range 10 {
		c := attachConfig(t, config.RoleOrdinary, boot)
		c.OperatorPubkeys = []string{op.pub}
		fast(&c)
		clients = append(clients, startClientConfig(t, c, WithLogger(slog.New(dbg))))
	}
	isMega := func(id peer.ID) bool {
		return slices.ContainsFunc(megas, func(m *Node) bool { return m.ID() == id })
	}
	waitFor(t, 20*time.Second, "every client on a mega-supernode", func() bool {
		for _, c := range clients {
			if !isMega(c.attachmentForTest()) {
				return false
			}
		}
		return true
	})
	for _, m := range megas {
		if l := m.admission.Load(); l == 0 || l > 6 {
			t.Fatalf("mega %s holds %d clients: want spread, at most its capacity 6", m.ID().ShortString(), l)
		}
	}
	// The regular supernodes have room again: clients go home, spread out.
	for _, r := range regs {
		r.sems.Attached.SetMax(10)
	}
	moved := map[peer.ID]time.Time{}
	deadline := time.Now().Add(20 * time.Second)
	for len(moved) < len(clients) && time.Now().Before(deadline) {
		for _, c := range clients {
			if a := c.attachmentForTest(); a != "" && !isMega(a) {
				if _, ok := moved[c.ID()]; !ok {
					moved[c.ID()] = time.Now()
				}
			}
		}
		time.Sleep(10 * time.Millisecond) // sampling move times of many clients
	}
	if len(moved) != len(clients) {
		for _, c := range clients {
			if _, ok := moved[c.ID()]; !ok {
				t.Logf("client %s on %s, home %v, attempts accept %v busy %v error %v", c.ID().ShortString(), c.attachmentForTest().ShortString(),
					cluster.Home(c.Ring(), []byte(c.ID())), c.metricForTest(t, "overlayd_client_attach_attempts_total", "result", "accept"), c.metricForTest(t, "overlayd_client_attach_attempts_total", "result", "busy"), c.metricForTest(t, "overlayd_client_attach_attempts_total", "result", "error"))
			}
		}
		for _, r := range regs {
			t.Logf("regular %s: load %d, max %d", r.ID().ShortString(), r.admission.Load(), r.sems.Attached.Max())
		}
		t.Fatalf("%d of %d clients back on regular supernodes", len(moved), len(clients))
	}
	var first, last time.Time
	for _, at := range moved {
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	if last.Sub(first) < time.Second {
		t.Fatalf("all clients moved back within %v: want them spread", last.Sub(first))
	}
	t.Logf("hand-back spread over %v", last.Sub(first))
}
