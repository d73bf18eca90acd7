package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"

	"github.com/overlayd/overlayd/node/circuit"
	"github.com/overlayd/overlayd/node/tunnel"
	"github.com/overlayd/overlayd/protocol"
)

// Tunnels: the node's tunnel manager (package node/tunnel) and its path
// to a peer; the routes are package node/api's.

// ErrRelayBusy: the supernode relaying to the peer refused the circuit
// (relay v2 status RESOURCE_LIMIT_EXCEEDED, or PERMISSION_DENIED, which an
// overlayd supernode answers when its circuit bound is reached or when this
// peer or the target is over its relay byte or rate budget; the status
// does not say which).
var ErrRelayBusy = errors.New("supernode relay busy or relay budget exhausted")

// directDialTimeout bounds a direct dial to a peer's known addresses
// before the node tries its supernode's relay.
const directDialTimeout = 5 * time.Second

func (n *Node) startTunnels() error {
	cfg := tunnel.Config{Window: n.cfg.TunnelWindow, IdleTimeout: n.cfg.TunnelIdleTimeout}
	if n.cfg.TunnelMaxConns > 0 {
		cfg.MaxConns = n.cfg.TunnelMaxConns
		cfg.MaxConnsPerService = min(64, n.cfg.TunnelMaxConns)
		cfg.MaxConnsPerConnect = min(64, n.cfg.TunnelMaxConns)
	}
	m, err := tunnel.New(n.host, cfg, tunnel.WithLogger(n.base), tunnel.WithRegisterer(n.reg),
		tunnel.WithClock(n.now), tunnel.WithDialer(tunnelDialer{n}))
	if err != nil {
		return fmt.Errorf("tunnels: %w", err)
	}
	n.tunnels = m
	m.Start()
	return nil
}

// Tunnels returns the node's tunnel manager (nil before Start).
func (n *Node) Tunnels() *tunnel.Manager { return n.tunnels }

// tunnelDialer opens tunnel streams: on a direct connection when there is
// one or the peer's known addresses give one, otherwise through the relay
// of the supernode the peer is attached to (found with the locate
// protocol, as ping does).
type tunnelDialer struct{ n *Node }

var _ tunnel.Dialer = tunnelDialer{}

func (d tunnelDialer) Open(ctx context.Context, p peer.ID) (network.Stream, error) {
	n, h := d.n, d.n.host
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
	n.log.Debug("tunnel stream", "remote", p.ShortString(), "limited", s.Conn().Stat().Limited)
	return s, nil
}

// reach connects to p: its known addresses first, then the relay.
func (d tunnelDialer) reach(ctx context.Context, p peer.ID) error {
	n, h := d.n, d.n.host
	// After a relay cut the tunnel has just tried a direct connection
	// (tunnel.Config.CutDirectTimeout): dialing addresses that may hang for
	// directDialTimeout again would only delay the fresh circuit.
	if len(h.Peerstore().Addrs(p)) > 0 && !tunnel.AfterCut(ctx) {
		dctx, cancel := context.WithTimeout(ctx, directDialTimeout)
		err := h.Connect(dctx, peer.AddrInfo{ID: p})
		cancel()
		if err == nil {
			return nil
		}
	}
	relay, err := n.Locate(ctx, p)
	if err != nil {
		return fmt.Errorf("find %s's supernode: %w", p.ShortString(), err)
	}
	if relay.ID != n.ID() {
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

func (d tunnelDialer) OpenDirect(ctx context.Context, p peer.ID) (network.Stream, error) {
	// Without WithAllowLimitedConn the swarm uses a direct connection,
	// dials one from the peerstore, or waits for hole punching to make
	// one until ctx ends.
	return tunnel.HostDialer{H: d.n.host}.OpenDirect(ctx, p)
}
