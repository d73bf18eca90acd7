package dirdriver

import (
	"testing"

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
