package circuit

import (
	"log/slog"
	"testing"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	ma "github.com/multiformats/go-multiaddr"
)

func TestV2Reachability(t *testing.T) {
	a := ma.StringCast("/ip4/1.2.3.4/tcp/1")
	for _, tc := range []struct {
		name string
		e    event.EvtHostReachableAddrsChanged
		v1   network.Reachability
		want network.Reachability
	}{
		{"nothing known", event.EvtHostReachableAddrsChanged{}, network.ReachabilityUnknown, network.ReachabilityUnknown},
		{"v1 only", event.EvtHostReachableAddrsChanged{Unknown: []ma.Multiaddr{a}}, network.ReachabilityPrivate, network.ReachabilityPrivate},
		{"one reachable", event.EvtHostReachableAddrsChanged{Reachable: []ma.Multiaddr{a}, Unreachable: []ma.Multiaddr{a}}, network.ReachabilityPrivate, network.ReachabilityPublic},
		{"only unreachable", event.EvtHostReachableAddrsChanged{Unreachable: []ma.Multiaddr{a}}, network.ReachabilityPublic, network.ReachabilityPrivate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := (reachState{v1: tc.v1, v2: v2Reachability(tc.e)}).value(); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestReachSet: a change is reported once; a pinned Reach keeps its value.
func TestReachSet(t *testing.T) {
	r := NewReach(nil, slog.New(slog.DiscardHandler))
	if r.Get() != network.ReachabilityUnknown || !r.Set(network.ReachabilityPublic) || r.Set(network.ReachabilityPublic) || r.Get() != network.ReachabilityPublic {
		t.Fatal("unpinned Reach")
	}
	pub := network.ReachabilityPrivate
	p := NewReach(&pub, slog.New(slog.DiscardHandler))
	if p.Set(network.ReachabilityPublic) || p.Get() != network.ReachabilityPrivate {
		t.Fatal("pinned Reach changed")
	}
	if run, err := p.Watch(nil, nil); run != nil || err != nil {
		t.Fatal("pinned Reach watches")
	}
}
