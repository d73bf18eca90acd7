package lan

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

func idForTest(t *testing.T) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func infoForTest(t *testing.T) peer.AddrInfo {
	t.Helper()
	return peer.AddrInfo{ID: idForTest(t), Addrs: []ma.Multiaddr{ma.StringCast("/ip4/192.0.2.1/tcp/4101")}}
}

// TestPeersBounds: the dialling core keeps to its bounds: one attempt
// per spacing, perMinute in any minute, none once want found
// peers are connected, a doubling backoff per failed peer, and at most
// knownMax peers remembered.
func TestPeersBounds(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	none := func(peer.ID) bool { return false }

	t.Run("spacing and budget", func(t *testing.T) {
		p := newPeers()
		for range 100 {
			p.found(infoForTest(t), t0)
		}
		if _, ok := p.next(t0, none); !ok {
			t.Fatal("no attempt on a fresh peer")
		}
		if _, ok := p.next(t0.Add(spacing/2), none); ok {
			t.Fatal("second attempt within spacing")
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
			if i > 0 && at[i].Sub(at[i-1]) < spacing {
				t.Fatalf("attempts %v apart", at[i].Sub(at[i-1]))
			}
			in := 0
			for _, b := range at[i:] {
				if b.Sub(at[i]) < time.Minute {
					in++
				}
			}
			if in > perMinute {
				t.Fatalf("%d attempts in the minute from %v", in, at[i].Sub(t0))
			}
		}
		if len(at) < perMinute {
			t.Fatalf("only %d attempts in two minutes with 100 peers due", len(at))
		}
	})

	t.Run("enough connected", func(t *testing.T) {
		p := newPeers()
		conn := map[peer.ID]bool{}
		for i := range want + 1 {
			ai := infoForTest(t)
			p.found(ai, t0)
			if i < want {
				conn[ai.ID] = true
			}
		}
		if ai, ok := p.next(t0, func(id peer.ID) bool { return conn[id] }); ok {
			t.Fatalf("dialled %s with %d found peers connected", ai.ID, want)
		}
	})

	t.Run("backoff", func(t *testing.T) {
		p := newPeers()
		ai := infoForTest(t)
		p.found(ai, t0)
		now := t0
		want := retryMin
		for range 8 {
			got, ok := p.next(now, none)
			if !ok || got.ID != ai.ID {
				t.Fatalf("no attempt at %v", now.Sub(t0))
			}
			p.done(ai.ID, false, now)
			want = min(2*want, retryMax)
			if _, ok := p.next(now.Add(want-time.Millisecond), none); ok {
				t.Fatalf("retried before its backoff %v", want)
			}
			now = now.Add(want)
		}
		if want != retryMax {
			t.Fatalf("backoff %v, want capped at %v", want, retryMax)
		}
		// Found again: the backoff stands (the resolver's reports do not
		// reset it); a success does.
		p.found(ai, now)
		if _, ok := p.next(now, none); !ok {
			t.Fatal("no attempt when due")
		}
		p.done(ai.ID, true, now)
		if _, ok := p.next(now.Add(retryMin), none); !ok {
			t.Fatal("a peer dialled successfully is not dialled again after retryMin")
		}
	})

	t.Run("known bounded", func(t *testing.T) {
		p := newPeers()
		first := infoForTest(t)
		p.found(first, t0)
		for i := 1; i <= knownMax; i++ {
			p.found(infoForTest(t), t0.Add(time.Duration(i)*time.Second))
		}
		if len(p.known) != knownMax {
			t.Fatalf("%d peers known, want %d", len(p.known), knownMax)
		}
		if _, ok := p.known[first.ID]; ok {
			t.Fatal("the peer seen longest ago was kept")
		}
	})
}

// TestNotifeeFilters: the node's own reports and loopback addresses
// (outside tests) are dropped; the loop is woken without blocking.
func TestNotifeeFilters(t *testing.T) {
	self := idForTest(t)
	nf := &notifee{self: self, now: time.Now, wake: make(chan struct{}, 1), peers: newPeers()}
	other := idForTest(t)
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
