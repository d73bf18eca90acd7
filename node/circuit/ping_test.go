package circuit

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/client"
)

func newTestHost(t *testing.T) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

type noLocator struct{}

func (noLocator) Locate(context.Context, peer.ID) (peer.AddrInfo, error) {
	return peer.AddrInfo{}, client.ErrNotLocated
}

// TestPingDirect: over a direct connection the pinger pings there and
// asks no supernode; without one it asks the locator first; it refuses to
// ping itself.
func TestPingDirect(t *testing.T) {
	a, b := newTestHost(t), newTestHost(t)
	p := Pinger{Host: a, Locator: noLocator{}}
	if _, err := p.Ping(t.Context(), b.ID(), 1, 0); !errors.Is(err, client.ErrNotLocated) {
		t.Fatalf("ping without a connection: %v, want ErrNotLocated", err)
	}
	if err := a.Connect(t.Context(), peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		t.Fatal(err)
	}
	res, err := p.Ping(t.Context(), b.ID(), 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Path != "direct" || len(res.RTTMs) != 3 || res.Relay != "" {
		t.Fatalf("ping %+v", res)
	}
	if _, err := p.Ping(t.Context(), a.ID(), 1, 0); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("ping self: %v", err)
	}
}

// TestReachWatchEnds: the loop Watch returns ends with its context.
func TestReachWatchEnds(t *testing.T) {
	r := NewReach(nil, slog.New(slog.DiscardHandler))
	run, err := r.Watch(newTestHost(t), func() {})
	if err != nil || run == nil {
		t.Fatalf("Watch: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	run(ctx)
}
