package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

func TestMDNSConfigDefault(t *testing.T) {
	c := DefaultConfig()
	if !c.MDNS {
		t.Fatal("mDNS is off by default")
	}
	c.DataDir = t.TempDir()
	c.MDNS = false
	if err := c.Validate(); err != nil {
		t.Fatalf("mdns off: %v", err)
	}
}

func mdnsInfo(t *testing.T) peer.AddrInfo {
	t.Helper()
	return peer.AddrInfo{ID: newIDForTest(t), Addrs: []ma.Multiaddr{ma.StringCast("/ip4/192.0.2.1/tcp/4101")}}
}

// TestMDNSPeersBounds: the dialling core keeps to its bounds: one attempt
// per mdnsSpacing, mdnsPerMinute in any minute, none once mdnsWant found
// peers are connected, a doubling backoff per failed peer, and at most
// mdnsKnownMax peers remembered.
func TestMDNSPeersBounds(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	none := func(peer.ID) bool { return false }

	t.Run("spacing and budget", func(t *testing.T) {
		p := newMDNSPeers()
		for range 100 {
			p.found(mdnsInfo(t), t0)
		}
		if _, ok := p.next(t0, none); !ok {
			t.Fatal("no attempt on a fresh peer")
		}
		if _, ok := p.next(t0.Add(mdnsSpacing/2), none); ok {
			t.Fatal("second attempt within mdnsSpacing")
		}
		// One attempt a tick (a tenth of a second) for two minutes: the
		// spacing and the per-minute budget hold in every minute.
		var at []time.Time
		for now := t0; now.Before(t0.Add(2 * time.Minute)); now = now.Add(100 * time.Millisecond) {
			if _, ok := p.next(now, none); ok {
				at = append(at, now)
			}
		}
		for i := range at {
			if i > 0 && at[i].Sub(at[i-1]) < mdnsSpacing {
				t.Fatalf("attempts %v apart", at[i].Sub(at[i-1]))
			}
			in := 0
			for _, b := range at[i:] {
				if b.Sub(at[i]) < time.Minute {
					in++
				}
			}
			if in > mdnsPerMinute {
				t.Fatalf("%d attempts in the minute from %v", in, at[i].Sub(t0))
			}
		}
		if len(at) < mdnsPerMinute {
			t.Fatalf("only %d attempts in two minutes with 100 peers due", len(at))
		}
	})

	t.Run("enough connected", func(t *testing.T) {
		p := newMDNSPeers()
		conn := map[peer.ID]bool{}
		for i := range mdnsWant + 1 {
			ai := mdnsInfo(t)
			p.found(ai, t0)
			if i < mdnsWant {
				conn[ai.ID] = true
			}
		}
		if ai, ok := p.next(t0, func(id peer.ID) bool { return conn[id] }); ok {
			t.Fatalf("dialled %s with %d found peers connected", ai.ID, mdnsWant)
		}
	})

	t.Run("backoff", func(t *testing.T) {
		p := newMDNSPeers()
		ai := mdnsInfo(t)
		p.found(ai, t0)
		now := t0
		want := mdnsRetryMin
		for range 8 {
			got, ok := p.next(now, none)
			if !ok || got.ID != ai.ID {
				t.Fatalf("no attempt at %v", now.Sub(t0))
			}
			p.done(ai.ID, false, now)
			want = min(2*want, mdnsRetryMax)
			if _, ok := p.next(now.Add(want-time.Millisecond), none); ok {
				t.Fatalf("retried before its backoff %v", want)
			}
			now = now.Add(want)
		}
		if want != mdnsRetryMax {
			t.Fatalf("backoff %v, want capped at %v", want, mdnsRetryMax)
		}
		// Found again: the backoff stands (the resolver's reports do not
		// reset it); a success does.
		p.found(ai, now)
		if _, ok := p.next(now, none); !ok {
			t.Fatal("no attempt when due")
		}
		p.done(ai.ID, true, now)
		if _, ok := p.next(now.Add(mdnsRetryMin), none); !ok {
			t.Fatal("a peer dialled successfully is not dialled again after mdnsRetryMin")
		}
	})

	t.Run("known bounded", func(t *testing.T) {
		p := newMDNSPeers()
		first := mdnsInfo(t)
		p.found(first, t0)
		for i := 1; i <= mdnsKnownMax; i++ {
			p.found(mdnsInfo(t), t0.Add(time.Duration(i)*time.Second))
		}
		if len(p.known) != mdnsKnownMax {
			t.Fatalf("%d peers known, want %d", len(p.known), mdnsKnownMax)
		}
		if _, ok := p.known[first.ID]; ok {
			t.Fatal("the peer seen longest ago was kept")
		}
	})
}

// TestMDNSNotifeeFilters: the node's own reports and loopback addresses
// (outside tests) are dropped; the loop is woken without blocking.
func TestMDNSNotifeeFilters(t *testing.T) {
	self := newIDForTest(t)
	nf := &mdnsNotifee{self: self, now: time.Now, wake: make(chan struct{}, 1), peers: newMDNSPeers()}
	other := newIDForTest(t)
	lo := ma.StringCast("/ip4/127.0.0.1/tcp/4101")
	lan := ma.StringCast("/ip4/192.168.1.7/tcp/4101")
	nf.HandlePeerFound(peer.AddrInfo{ID: self, Addrs: []ma.Multiaddr{lan}})
	nf.HandlePeerFound(peer.AddrInfo{ID: other, Addrs: []ma.Multiaddr{lo}})
	if len(nf.peers.known) != 0 {
		t.Fatalf("known %v: self or a loopback-only peer recorded", nf.peers.known)
	}
	nf.HandlePeerFound(peer.AddrInfo{ID: other, Addrs: []ma.Multiaddr{lo, lan}})
	nf.HandlePeerFound(peer.AddrInfo{ID: other, Addrs: []ma.Multiaddr{lo, lan}}) // must not block
	k := nf.peers.known[other]
	if k == nil || len(k.addrs) != 1 || !k.addrs[0].Equal(lan) {
		t.Fatalf("known %+v, want the LAN address only", k)
	}
	if len(nf.wake) != 1 {
		t.Fatal("loop not woken")
	}
}

// TestMDNSUsed: when a node runs mDNS.
func TestMDNSUsed(t *testing.T) {
	boot := startNode(t, testConfig(t, RoleSupernode))
	tests := []struct {
		name  string
		tweak func(*Config)
		opts  []Option
		want  bool
		why   string
	}{
		{"loopback only", func(*Config) {}, nil, false, "loopback"},
		{"off", func(c *Config) { c.MDNS = false }, []Option{WithMDNSForTest(testMDNSService(t))}, false, "--mdns=false"},
		{"bootstrap", func(c *Config) { c.Bootstrap = []string{p2pAddr(boot)} }, []Option{WithMDNSForTest(testMDNSService(t))}, false, "bootstrap"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig(t, RoleOrdinary)
			tt.tweak(&c)
			n, err := New(c, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Start(context.Background()); err != nil {
				n.Close()
				t.Fatal(err)
			}
			t.Cleanup(func() { n.Close() })
			got, why := n.mdnsUsable()
			if got != tt.want || !strings.Contains(why, tt.why) {
				t.Fatalf("mdnsUsable = %v, %q; want %v, %q", got, why, tt.want, tt.why)
			}
		})
	}
}

// testMDNSService is a service name of this test alone, so that tests
// running at the same time on this machine do not find each other.
func testMDNSService(t *testing.T) string {
	t.Helper()
	var b [5]byte
	_, _ = rand.Read(b[:])
	return "_ovl" + hex.EncodeToString(b[:]) + "._udp"
}

// Discovery itself is tested only between network namespaces
// (cmd/overlayd TestMDNSLANDaemonsFindEachOther): started in this process,
// mDNS would multicast on the machine's own interfaces, and tests send
// traffic only to loopback and to namespaces they create.

const joinHintPrefix = "no peers: this node is alone"

// TestMDNSJoinHint: a node alone, with no bootstrap peers, says once how to
// join a network, and why it found no one.
func TestMDNSJoinHint(t *testing.T) {
	tests := []struct {
		name string
		opts []Option
		mdns bool
		why  string
	}{
		{"mdns unused on loopback", nil, true, "loopback"},
		{"mdns off", nil, false, "--mdns=false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m messages
			c := testConfig(t, RoleSupernode)
			c.MDNS = tt.mdns
			n, err := New(c, append(tt.opts, WithLogger(slog.New(&m)))...)
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Start(context.Background()); err != nil {
				n.Close()
				t.Fatal(err)
			}
			t.Cleanup(func() { n.Close() })
			waitFor(t, 10*c.AnnounceInterval, "join hint", func() bool { return m.has(joinHintPrefix) })
			hint := m.find(joinHintPrefix)
			if !strings.Contains(hint, "--bootstrap /ip4/") || !strings.Contains(hint, tt.why) {
				t.Fatalf("hint %q: want an example --bootstrap and %q", hint, tt.why)
			}
			// Once, over the node's whole life: Close waits for the loop.
			n.Close()
			if k := m.count(joinHintPrefix); k != 1 {
				t.Fatalf("hint logged %d times", k)
			}
		})
	}
}

// messages is a slog handler that keeps every record as text.
type messages struct {
	mu   sync.Mutex
	msgs []string
}

func (m *messages) Enabled(context.Context, slog.Level) bool { return true }
func (m *messages) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.Key + "=" + a.Value.String()); return true })
	m.mu.Lock()
	m.msgs = append(m.msgs, b.String())
	m.mu.Unlock()
	return nil
}
func (m *messages) WithAttrs([]slog.Attr) slog.Handler { return m }
func (m *messages) WithGroup(string) slog.Handler      { return m }

func (m *messages) find(prefix string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.msgs {
		if strings.HasPrefix(s, prefix) {
			return s
		}
	}
	return ""
}

func (m *messages) has(prefix string) bool { return m.find(prefix) != "" }

func (m *messages) count(prefix string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := 0
	for _, s := range m.msgs {
		if strings.HasPrefix(s, prefix) {
			k++
		}
	}
	return k
}

// TestJoinHintSaysWhy: the hint names what mDNS found, without starting it.
func TestJoinHintSaysWhy(t *testing.T) {
	var m messages
	n, err := New(testConfig(t, RoleSupernode), WithLogger(slog.New(&m)))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		n.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	n.joinHint(true, "", 0)
	n.joinHint(true, "", 3)
	n.joinHint(false, "--mdns=false", 0)
	for _, want := range []string{"mDNS found no overlayd peer", "found 3 overlayd peers", "--mdns=false"} {
		found := false
		m.mu.Lock()
		msgs := append([]string(nil), m.msgs...)
		m.mu.Unlock()
		for _, s := range msgs {
			if strings.HasPrefix(s, joinHintPrefix) && strings.Contains(s, want) {
				found = true
			}
		}
		if !found {
			t.Fatalf("no hint says %q: %v", want, msgs)
		}
	}
}
