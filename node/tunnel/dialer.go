package tunnel

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"

	"github.com/overlayd/overlayd/node/circuit"
	"github.com/overlayd/overlayd/protocol"
)

// Locator finds the supernode a peer is attached to, with its addresses
// (the node's Locate).
type Locator interface {
	Locate(ctx context.Context, target peer.ID) (peer.AddrInfo, error)
}

// RelayDialer opens tunnel streams from Host: on a direct connection when
// there is one or the peer's known addresses give one, otherwise through
// the relay of the supernode the peer is attached to (found by Locator,
// as ping does).
type RelayDialer struct {
	Host    host.Host
	Locator Locator
	Log     *slog.Logger
}

var _ Dialer = RelayDialer{}

// DirectDialTimeout bounds a direct dial to a peer's known addresses
// before RelayDialer tries its supernode's relay.
const DirectDialTimeout = 5 * time.Second

// Open opens a stream to p: directly, else through p's supernode relay.
func (d RelayDialer) Open(ctx context.Context, p peer.ID) (network.Stream, error) {
	h := d.Host
	lctx := network.WithAllowLimitedConn(ctx, "tunnel")
	if len(h.Network().ConnsToPeer(p)) == 0 {
		if err := d.reach(ctx, p); err != nil {
			return nil, err
		}
	}
	s, err := h.NewStream(lctx, p, protocol.TunnelID)
	if err != nil {
		return nil, err
	}
	d.Log.Debug("tunnel stream", "remote", p.ShortString(), "limited", s.Conn().Stat().Limited)
	return s, nil
}

// reach connects to p: its known addresses first, then the relay.
func (d RelayDialer) reach(ctx context.Context, p peer.ID) error {
	h := d.Host
	// After a relay cut the tunnel has just tried a direct connection
	// (Config.CutDirectTimeout): dialing addresses that may hang for
	// DirectDialTimeout again would only delay the fresh circuit.
	if len(h.Peerstore().Addrs(p)) > 0 && !AfterCut(ctx) {
		dctx, cancel := context.WithTimeout(ctx, DirectDialTimeout)
		err := h.Connect(dctx, peer.AddrInfo{ID: p})
		cancel()
		if err == nil {
			return nil
		}
	}
	relay, err := d.Locator.Locate(ctx, p)
	if err != nil {
		return fmt.Errorf("find %s's supernode: %w", p.ShortString(), err)
	}
	if relay.ID != h.ID() {
		h.Peerstore().AddAddrs(relay.ID, relay.Addrs, time.Hour)
	}
	// A circuit dial that failed a moment ago (a refused circuit, or one
	// made as the previous circuit closed) left p's /p2p-circuit addresses
	// in the swarm's dial backoff (5 s and more): the relay's answer now is
	// what counts, so forget it.
	clearDialBackoff(h, p)
	lctx := network.WithAllowLimitedConn(ctx, "tunnel")
	if err := h.Connect(lctx, peer.AddrInfo{ID: p, Addrs: circuit.Through(relay)}); err != nil {
		return relayError(relay.ID, err)
	}
	return nil
}

// clearDialBackoff forgets the swarm's dial backoff of p's addresses.
func clearDialBackoff(h host.Host, p peer.ID) {
	if sw, ok := h.Network().(interface{ Backoff() *swarm.DialBackoff }); ok {
		sw.Backoff().Clear(p)
	}
}

// relayError names a relay's refusal of a circuit. go-libp2p's circuit
// client reports the relay's status only in its error text.
func relayError(relay peer.ID, err error) error {
	msg := err.Error()
	for _, st := range []string{"RESOURCE_LIMIT_EXCEEDED", "PERMISSION_DENIED"} {
		if strings.Contains(msg, "error opening relay circuit: "+st) {
			return fmt.Errorf("%w: supernode %s answered %s", ErrRelayBusy, relay.ShortString(), st)
		}
	}
	return fmt.Errorf("connect through relay %s: %w", relay.ShortString(), err)
}

// OpenDirect opens a stream to p on a direct connection (HostDialer).
func (d RelayDialer) OpenDirect(ctx context.Context, p peer.ID) (network.Stream, error) {
	// Without WithAllowLimitedConn the swarm uses a direct connection,
	// dials one from the peerstore, or waits for hole punching to make
	// one until ctx ends.
	return HostDialer{H: d.Host}.OpenDirect(ctx, p)
}
