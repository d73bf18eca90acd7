package supernode

import (
	"testing"
	"time"

	"github.com/overlayd/overlayd/overlay/ring"
)

// TestLocateLocalClient: Locate of a client attached here answers this
// supernode from the Admission alone. There is no ring, so no presence
// record exists anywhere and only the local session can answer. A client
// not attached, or no longer, is not found.
func TestLocateLocalClient(t *testing.T) {
	n := newTestNet(t)
	sn := newSupernode(t, n, supernodeConfig{capacity: 2, adm: AdmissionConfig{Keepalive: 10 * time.Second}, router: &RouterConfig{}})
	ch := n.host(t)
	c := mustAccept(t, ch, sn.h.ID(), 1)

	if loc, ok := sn.r.Locate(ch.ID()); !ok || loc != sn.h.ID() {
		t.Fatalf("Locate(attached client) = %s, %v; want this supernode %s", loc, ok, sn.h.ID())
	}
	stranger := newPeerID(t)
	if loc, ok := sn.r.Locate(stranger); ok {
		t.Fatalf("Locate(unknown client) = %s, want not found", loc)
	}
	c.detach()
	waitFor(t, "the session to end", func() bool { return sn.adm.Load() == 0 })
	if loc, ok := sn.r.Locate(ch.ID()); ok {
		t.Fatalf("Locate(detached client) = %s, want not found", loc)
	}
}

// TestLocateAsksTheClientsHome: a supernode outside a client's home cluster
// locates it by asking the home (a lookup stream): here K is the whole ring,
// so the client attached at K is recorded at K, and H finds it there.
func TestLocateAsksTheClientsHome(t *testing.T) {
	n := newTestNet(t)
	var rp ring.Published
	var sns peerSet
	cfg := func() supernodeConfig {
		return supernodeConfig{capacity: 2, adm: AdmissionConfig{Keepalive: 10 * time.Second}, router: &RouterConfig{Ring: rp.Load, IsSupernode: sns.has}}
	}
	h, k := newSupernode(t, n, cfg()), newSupernode(t, n, cfg())
	sns.add(h.h.ID(), k.h.ID())
	rp.Publish(newRing(t, k.h.ID()))

	ch := n.host(t)
	mustAccept(t, ch, k.h.ID(), 1)
	waitFor(t, "K to record the client's presence", func() bool {
		p, ok := presenceOf(k.r, ch.ID())
		return ok && p.location == k.h.ID()
	})
	if loc, ok := h.r.Locate(ch.ID()); !ok || loc != k.h.ID() {
		t.Fatalf("H: Locate(client at K) = %s, %v; want K %s", loc, ok, k.h.ID())
	}
	if _, ok := presenceOf(h.r, ch.ID()); ok {
		t.Fatal("H holds a presence record: the answer did not come from the home")
	}
	if loc, ok := h.r.Locate(newPeerID(t)); ok {
		t.Fatalf("H: Locate(unknown client) = %s, want not found", loc)
	}
}
