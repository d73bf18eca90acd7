package node

import (
	"testing"
	"time"

	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/protocol"
)

func TestConfirmsRule(t *testing.T) {
	attach := []libp2pprotocol.ID{"/ipfs/id/1.0.0", protocol.AttachID}
	announced := []ma.Multiaddr{ma.StringCast("/ip4/203.0.113.7/tcp/4101"), ma.StringCast("/ip6/2001:db8::7/udp/4101/quic-v1")}
	for _, tc := range []struct {
		name   string
		remote string
		protos []libp2pprotocol.ID
		want   bool
	}{
		{"dialled at the announced address", "/ip4/203.0.113.7/tcp/4101", attach, true},
		{"connected from the announced IP, another port", "/ip4/203.0.113.7/tcp/51234", attach, true},
		{"the announced IPv6 address", "/ip6/2001:db8::7/udp/4101/quic-v1", attach, true},
		{"from another address than announced", "/ip4/198.51.100.1/tcp/4101", attach, false},
		{"does not serve attach", "/ip4/203.0.113.7/tcp/4101", []libp2pprotocol.ID{"/ipfs/id/1.0.0"}, false},
		{"relayed connection", "/p2p-circuit", attach, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			remote, err := ma.NewMultiaddr(tc.remote)
			if err != nil {
				t.Fatal(err)
			}
			if got := confirms(remote, tc.protos, announced); got != tc.want {
				t.Fatalf("confirms = %v, want %v", got, tc.want)
			}
		})
	}
}

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
		if sn.confirm.has(r.h.ID()) {
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
