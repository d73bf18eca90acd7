package node

import (
	"testing"
	"time"
)

// TestLiveHostWithoutAttachNotOnRing: a real host that announces itself
// as a supernode at its true address, but does not serve the attach
// protocol, is in every directory (its announcement is valid) but on no
// supernode's ring of an open network: it is never confirmed.
func TestLiveHostWithoutAttachNotOnRing(t *testing.T) {
	sns := supernodes(t, 3, 10)
	r := newRogue(t, sns...)
	msg := r.supernodeAnnouncement(t, 200, nil, uint64(time.Now().UnixNano()))
	r.publishUntil(t, "the rogue in every directory", func(int) []byte { return msg }, func() bool {
		for _, sn := range sns {
			if _, ok := sn.Directory().Snapshot().Get(r.h.ID()); !ok {
				return false
			}
		}
		return true
	})
	// Let every supernode's mesh dial it and identify it.
	waitFor(t, 10*time.Second, "supernodes connected to the rogue", func() bool {
		for _, sn := range sns {
			if len(sn.Host().Network().ConnsToPeer(r.h.ID())) == 0 {
				return false
			}
		}
		return true
	})
	<-time.After(2 * sns[0].debounc)
	for _, sn := range sns {
		if sn.dirs.ConfirmedForTest(r.h.ID()) {
			t.Fatalf("%s confirmed a host that does not serve attach", sn.ID().ShortString())
		}
		for _, m := range sn.Ring().Members() {
			if m.ID == r.h.ID().String() {
				t.Fatalf("%s put an unconfirmed supernode on its ring", sn.ID().ShortString())
			}
		}
		if sn.Ring().Len() != len(sns) {
			t.Fatalf("%s's ring has %d members, want the %d honest supernodes", sn.ID().ShortString(), sn.Ring().Len(), len(sns))
		}
	}
}
