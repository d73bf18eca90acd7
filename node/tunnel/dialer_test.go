package tunnel

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

type failLocator struct{ err error }

func (f failLocator) Locate(context.Context, peer.ID) (peer.AddrInfo, error) {
	return peer.AddrInfo{}, f.err
}

// TestRelayDialerDirect: with a connection, or with known addresses, the
// dialer opens its stream directly; without either it asks the locator.
func TestRelayDialerDirect(t *testing.T) {
	a, b := newHost(t), newHost(t)
	newManager(t, b, Config{})
	errNone := errors.New("no supernode knows it")
	d := RelayDialer{Host: a, Locator: failLocator{errNone}, Log: slog.New(slog.DiscardHandler)}
	if _, err := d.Open(t.Context(), b.ID()); !errors.Is(err, errNone) {
		t.Fatalf("Open without a path: %v, want the locator's error", err)
	}
	a.Peerstore().AddAddrs(b.ID(), b.Addrs(), 0xffffffff)
	s, err := d.Open(t.Context(), b.ID())
	if err != nil {
		t.Fatal(err)
	}
	if s.Conn().Stat().Limited {
		t.Fatal("stream on a limited connection")
	}
	s.Reset()
	s, err = d.OpenDirect(t.Context(), b.ID())
	if err != nil {
		t.Fatal(err)
	}
	s.Reset()
}

// TestRelayError: a relay's refusal is ErrRelayBusy; other failures are
// named, not classified.
func TestRelayError(t *testing.T) {
	p := peer.ID("relay")
	if err := relayError(p, errors.New("error opening relay circuit: RESOURCE_LIMIT_EXCEEDED (204)")); !errors.Is(err, ErrRelayBusy) {
		t.Fatalf("refusal: %v", err)
	}
	if err := relayError(p, errors.New("error opening relay circuit: PERMISSION_DENIED")); !errors.Is(err, ErrRelayBusy) {
		t.Fatalf("denial: %v", err)
	}
	if err := relayError(p, errors.New("dial timeout")); errors.Is(err, ErrRelayBusy) {
		t.Fatalf("timeout classified as busy: %v", err)
	}
}
