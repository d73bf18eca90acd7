package node

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

const testKeepalive = 100 * time.Millisecond

func attachConfig(tb testing.TB, role config.Role, boot string) Config {
	tb.Helper()
	c := testConfig(tb, role)
	c.AnnounceInterval = 300 * time.Millisecond
	c.Keepalive = testKeepalive
	c.BusyRetryAfter = 100 * time.Millisecond
	c.RetryBase = 50 * time.Millisecond
	c.RetryMax = 500 * time.Millisecond
	c.ReturnInterval = time.Hour
	if boot != "" {
		c.Bootstrap = []string{boot}
	}
	return c
}

// supernodes starts k supernodes that know each other and waits for their
// rings to agree.
func supernodes(t *testing.T, k, capacity int) []*Node {
	t.Helper()
	var sns []*Node
	boot := ""
	for range k {
		c := attachConfig(t, config.RoleSupernode, boot)
		c.Capacity = capacity
		sn := startNode(t, c)
		if boot == "" {
			boot = p2pAddr(sn)
		}
		sns = append(sns, sn)
	}
	waitFor(t, 5*time.Second, "supernode rings", func() bool {
		for _, sn := range sns {
			if r := sn.Ring(); r == nil || r.Len() != k {
				return false
			}
		}
		return true
	})
	return sns
}

func byID(sns []*Node, id peer.ID) *Node {
	for _, sn := range sns {
		if sn.ID() == id {
			return sn
		}
	}
	return nil
}

func newKey(t *testing.T) (crypto.PrivKey, peer.ID) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(k)
	return k, id
}

func startClient(t *testing.T, boot string, opts ...Option) *Node {
	t.Helper()
	return startClientConfig(t, attachConfig(t, config.RoleOrdinary, boot), opts...)
}

func startClientConfig(t *testing.T, c Config, opts ...Option) *Node {
	t.Helper()
	n, err := New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		n.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func TestAttachHomeCluster(t *testing.T) {
	sns := supernodes(t, 3, 10)
	key, id := newKey(t)
	home := cluster.Home(sns[0].Ring(), []byte(id))
	if len(home) != 3 {
		t.Fatalf("home cluster %v", home)
	}
	c := startClient(t, p2pAddr(sns[0]), WithIdentity(key))
	waitFor(t, 5*time.Second, "attached", func() bool { return c.attachmentForTest() != "" })
	if got := c.attachmentForTest(); got != home[0] {
		t.Fatalf("attached to %s, want the home cluster's first member %s", got.ShortString(), home[0].ShortString())
	}
	a, _ := c.client.Attachment()
	if !a.Home {
		t.Fatal("attachment not marked home")
	}
	if byID(sns, home[0]).admission.Load() != 1 {
		t.Fatal("supernode does not count the session")
	}
	// The supernode's next announcement carries the load.
	waitFor(t, 2*time.Second, "load announced", func() bool {
		e, ok := c.Directory().Snapshot().Get(home[0])
		return ok && e.Load == 1
	})
}

func TestAttachBusyGoesToNext(t *testing.T) {
	sns := supernodes(t, 3, 10)
	key, id := newKey(t)
	home := cluster.Home(sns[0].Ring(), []byte(id))
	full := byID(sns, home[0])
	if err := full.sems.Attached.SetMax(0); err != nil {
		t.Fatal(err)
	}
	c := startClient(t, p2pAddr(sns[0]), WithIdentity(key))
	waitFor(t, 5*time.Second, "attached", func() bool { return c.attachmentForTest() != "" })
	if got := c.attachmentForTest(); got != home[1] {
		t.Fatalf("attached to %s, want the second member %s", got.ShortString(), home[1].ShortString())
	}
	if c.metricForTest(t, "overlayd_client_attach_attempts_total", "result", "busy") < 1 || c.metricForTest(t, "overlayd_client_attach_attempts_total", "result", "error") != 0 {
		t.Fatalf("attempts: busy %v, error %v", c.metricForTest(t, "overlayd_client_attach_attempts_total", "result", "busy"), c.metricForTest(t, "overlayd_client_attach_attempts_total", "result", "error"))
	}
	if st := full.admission.Stats(); st.Busy < 1 || st.Accepted != 0 {
		t.Fatalf("full supernode stats %+v", st)
	}
}

func TestClientFailsOverWhenSupernodeDies(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			sns := supernodes(t, 3, 10)
			key, _ := newKey(t)
			c := startClient(t, p2pAddr(sns[0]), WithIdentity(key))
			waitFor(t, 5*time.Second, "attached", func() bool { return c.attachmentForTest() != "" })
			first := byID(sns, c.attachmentForTest())
			if crash {
				first.CloseAbruptlyForTest()
			} else {
				first.Close()
			}
			// A closed connection is noticed at once; the bound below is
			// the keepalive bound plus the reattachment spread.
			bound := protocol.MissedKeepalives*testKeepalive + 2*time.Second
			d := waitFor(t, bound, "re-attached", func() bool {
				a := c.attachmentForTest()
				return a != "" && a != first.ID()
			})
			t.Logf("re-attached after %v", d)
		})
	}
}

// blackhole is a supernode that accepts a session and then never answers:
// unresponsive, not dead, so only keepalives can tell.
func blackhole(t *testing.T) (peer.AddrInfo, *atomic.Int32) {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	var accepted atomic.Int32
	h.SetStreamHandler(protocol.AttachID, func(s network.Stream) {
		fr := protocol.NewFrameReader(s, protocol.MaxAttachFrame)
		var req pb.AttachRequest
		if fr.Read(&req) != nil {
			s.Reset()
			return
		}
		protocol.WriteFrame(s, &pb.AttachResponse{Status: pb.AttachResponse_STATUS_ACCEPT, KeepaliveMs: uint32(testKeepalive / time.Millisecond)})
		accepted.Add(1)
		var f pb.SessionFrame
		for fr.Read(&f) == nil { // swallow pings, never pong
		}
	})
	return peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()}, &accepted
}

func TestClientDetectsUnresponsiveSupernode(t *testing.T) {
	hole, accepted := blackhole(t)
	c := startClient(t, fmt.Sprintf("%s/p2p/%s", hole.Addrs[0], hole.ID))
	// With no directory, the client tries its bootstrap peer: the hole.
	waitFor(t, 5*time.Second, "attached to the hole", func() bool { return c.attachmentForTest() == hole.ID })
	start := time.Now()
	waitFor(t, protocol.MissedKeepalives*testKeepalive+time.Second, "session declared dead", func() bool { return c.attachmentForTest() != hole.ID })
	if d := time.Since(start); d < (protocol.MissedKeepalives-1)*testKeepalive {
		t.Fatalf("declared dead after %v: sooner than the keepalive bound", d)
	}
	if c.metricForTest(t, "overlayd_client_dead_supernodes_total") < 1 {
		t.Fatal("dead supernode not counted")
	}
	_ = accepted
}

func TestSupernodeFreesSlot(t *testing.T) {
	sns := supernodes(t, 1, 10)
	sn := sns[0]
	t.Run("client closes", func(t *testing.T) {
		c := startClient(t, p2pAddr(sn))
		waitFor(t, 5*time.Second, "attached", func() bool { return sn.admission.Load() == 1 })
		c.Close()
		waitFor(t, testKeepalive, "slot freed", func() bool { return sn.admission.Load() == 0 && sn.sems.Attached.InUse() == 0 })
	})
	t.Run("client silent", func(t *testing.T) {
		// A raw peer that attaches and then never pings.
		rawAttach(t, sn)
		start := time.Now()
		waitFor(t, protocol.MissedKeepalives*testKeepalive+500*time.Millisecond, "silent client dropped and its slot released", func() bool {
			return sn.admission.Load() == 0 && sn.sems.Attached.InUse() == 0
		})
		if d := time.Since(start); d < (protocol.MissedKeepalives-1)*testKeepalive {
			t.Fatalf("dropped after %v: before the keepalive bound", d)
		}
	})
}

// TestAttachSurge: one supernode of capacity C, C clients attached, then
// 20×C more clients attaching at once (real hosts, one process).
func TestAttachSurge(t *testing.T) {
	if testing.Short() {
		t.Skip("surge starts 200 hosts")
	}
	C := 10
	if raceEnabled {
		C = 5
	}
	// Realistic timing: 210 nodes share 2 cores here (and, under -race with
	// other packages' tests beside them, pongs were seen 3 s late while
	// 100 hosts started), so a short keepalive would measure the
	// scheduler, not the protocol. Keepalive latency under a surge is
	// measured by BenchmarkSurge instead.
	slow := func(c Config) Config {
		c.AnnounceInterval = time.Second
		c.Keepalive = 3 * time.Second
		c.BusyRetryAfter = time.Second
		c.RetryBase = 500 * time.Millisecond
		c.RetryMax = 4 * time.Second
		return c
	}
	snc := slow(attachConfig(t, config.RoleSupernode, ""))
	snc.Capacity = C
	sn := startNode(t, snc)
	boot := p2pAddr(sn)
	dbg := &collect{}
	defer func() {
		for _, m := range dbg.msgs {
			t.Log(m)
		}
	}()
	var early []*Node
	for range C {
		early = append(early, startClientConfig(t, slow(attachConfig(t, config.RoleOrdinary, boot)), WithLogger(slog.New(dbg))))
	}
	waitFor(t, 10*time.Second, "first C attached", func() bool {
		for _, c := range early {
			if c.attachmentForTest() == "" {
				return false
			}
		}
		return sn.admission.Load() == C
	})
	firstSN := map[*Node]peer.ID{}
	for _, c := range early {
		firstSN[c] = c.attachmentForTest()
	}

	// Sample the supernode while the surge runs.
	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if l := int64(sn.sems.Attached.InUse()); l > peak.Load() {
					peak.Store(l)
				}
			}
		}
	})
	// Start the surge clients and let them connect (TLS handshakes are not
	// what this test measures), then open the gate: all 20×C attach at once.
	gate := make(chan struct{})
	var surge []*Node
	var mu sync.Mutex
	var sg sync.WaitGroup
	for range 20 * C {
		sg.Go(func() {
			c := startClientConfig(t, slow(attachConfig(t, config.RoleOrdinary, boot)), WithLogger(slog.New(dbg)), WithAttachGateForTest(gate))
			mu.Lock()
			surge = append(surge, c)
			mu.Unlock()
		})
	}
	sg.Wait()
	waitFor(t, 60*time.Second, "surge clients connected", func() bool {
		for _, c := range surge {
			if c.Host().Network().Connectedness(sn.ID()) != network.Connected || c.Ring() == nil {
				return false
			}
		}
		return true
	})
	close(gate)
	// Every surge client is refused at least once and keeps retrying.
	defer func() {
		if t.Failed() {
			var acc, busy, errs, redir, none float64
			for _, c := range surge {
				acc += c.metricForTest(t, "overlayd_client_attach_attempts_total", "result", "accept")
				busy += c.metricForTest(t, "overlayd_client_attach_attempts_total", "result", "busy")
				errs += c.metricForTest(t, "overlayd_client_attach_attempts_total", "result", "error")
				redir += c.metricForTest(t, "overlayd_client_attach_attempts_total", "result", "redirect")
				if c.metricForTest(t, "overlayd_client_attach_attempts_total", "result", "busy")+c.metricForTest(t, "overlayd_client_attach_attempts_total", "result", "accept") == 0 {
					none++
				}
			}
			t.Logf("surge clients: accept %v busy %v error %v redirect %v, never answered %v", acc, busy, errs, redir, none)
		}
	}()
	waitFor(t, 30*time.Second, "every surge client refused", func() bool {
		for _, c := range surge {
			if c.metricForTest(t, "overlayd_client_attach_attempts_total", "result", "busy") < 1 {
				return false
			}
		}
		return true
	})
	busy := 0.0
	for _, c := range surge {
		busy += c.metricForTest(t, "overlayd_client_attach_attempts_total", "result", "busy")
	}
	close(stop)
	wg.Wait()

	if p := peak.Load(); p > int64(C) {
		t.Fatalf("attached peaked at %d, capacity %d", p, C)
	}
	for _, c := range append(early, surge...) {
		if e := c.metricForTest(t, "overlayd_client_attach_attempts_total", "result", "error"); e != 0 {
			t.Fatalf("%s: %v attach attempts failed without a BUSY answer", c.ID().ShortString(), e)
		}
	}
	for _, c := range early {
		a, ok := c.client.Attachment()
		if !ok || a.Supernode != firstSN[c] || a.Failovers != 0 {
			t.Fatalf("early client lost its session: %+v %v", a, ok)
		}
	}
	if sn.admission.Load() != C || sn.Host().Network().Connectedness(early[0].ID()) != network.Connected {
		t.Fatalf("supernode after the surge: %d attached", sn.admission.Load())
	}
	t.Logf("surge: %d clients, %v BUSY answers, peak attached %d of %d", len(surge), busy, peak.Load(), C)
}

// rawAttach attaches a bare libp2p host (no overlayd client behind it) to
// sn and returns the host and the accepted session stream: tests drive it
// by hand to play a silent or stalled client.
func rawAttach(t *testing.T, sn *Node) (host.Host, network.Stream) {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if err := h.Connect(context.Background(), peer.AddrInfo{ID: sn.ID(), Addrs: sn.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	s, err := h.NewStream(context.Background(), sn.ID(), protocol.AttachID)
	if err != nil {
		t.Fatal(err)
	}
	claim, err := protocol.SignPresence(h.Peerstore().PrivKey(h.ID()), sn.ID(), 1)
	if err != nil {
		t.Fatal(err)
	}
	protocol.WriteFrame(s, &pb.AttachRequest{ProtocolVersion: protocol.Version, SessionSeq: 1, Presence: claim})
	var resp pb.AttachResponse
	if err := protocol.NewFrameReader(s, protocol.MaxSessionFrame).Read(&resp); err != nil || resp.GetStatus() != pb.AttachResponse_STATUS_ACCEPT {
		t.Fatalf("attach: %v %v", resp.GetStatus(), err)
	}
	return h, s
}
