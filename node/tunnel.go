package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"

	"github.com/overlayd/overlayd/node/circuit"
	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/node/tunnel"
	"github.com/overlayd/overlayd/protocol"
)

// Tunnels: the node's tunnel manager (package node/tunnel), its path to a
// peer and its local API routes.
//
//	GET  /v1/tunnels                   Tunnels
//	POST /v1/tunnels/expose            ExposeRequest → ExposedService
//	POST /v1/tunnels/unexpose          UnexposeRequest → {}
//	POST /v1/tunnels/connect           ConnectRequest → TunnelConnect
//	POST /v1/tunnels/disconnect        DisconnectRequest → {}

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

// tunnelRoutes adds the tunnel routes.
func (n *Node) tunnelRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/tunnels", func(w http.ResponseWriter, _ *http.Request) {
		localapi.WriteJSON(w, n.tunnels.List())
	})
	mux.HandleFunc("POST /v1/tunnels/expose", func(w http.ResponseWriter, r *http.Request) {
		var req localapi.ExposeRequest
		if !decode(w, r, &req) {
			return
		}
		var allow []peer.ID
		for _, s := range req.Allow {
			p, err := peer.Decode(s)
			if err != nil {
				localapi.WriteError(w, http.StatusBadRequest, fmt.Errorf("--allow %q is not a peer ID: %w", s, err))
				return
			}
			allow = append(allow, p)
		}
		res, err := n.tunnels.Expose(req.Name, req.Target, allow, req.AllowAny)
		if err != nil {
			localapi.WriteError(w, tunnelStatus(err), fmt.Errorf("expose %s: %w", req.Name, err))
			return
		}
		localapi.WriteJSON(w, res)
	})
	mux.HandleFunc("POST /v1/tunnels/unexpose", func(w http.ResponseWriter, r *http.Request) {
		var req localapi.UnexposeRequest
		if !decode(w, r, &req) {
			return
		}
		if err := n.tunnels.Unexpose(req.Name); err != nil {
			localapi.WriteError(w, tunnelStatus(err), err)
			return
		}
		localapi.WriteJSON(w, struct{}{})
	})
	mux.HandleFunc("POST /v1/tunnels/connect", func(w http.ResponseWriter, r *http.Request) {
		var req localapi.ConnectRequest
		if !decode(w, r, &req) {
			return
		}
		p, err := peer.Decode(req.Peer)
		if err != nil {
			localapi.WriteError(w, http.StatusBadRequest, fmt.Errorf("%q is not a peer ID: %w", req.Peer, err))
			return
		}
		listen := req.Listen
		if listen == "" {
			listen = "127.0.0.1:0"
		}
		res, err := n.tunnels.Connect(n.httpCtx, p, req.Service, listen)
		if err != nil {
			localapi.WriteError(w, tunnelStatus(err), fmt.Errorf("connect %s/%s: %w", req.Peer, req.Service, err))
			return
		}
		localapi.WriteJSON(w, res)
	})
	mux.HandleFunc("POST /v1/tunnels/disconnect", func(w http.ResponseWriter, r *http.Request) {
		var req localapi.DisconnectRequest
		if !decode(w, r, &req) {
			return
		}
		if err := n.tunnels.Disconnect(req.Listen); err != nil {
			localapi.WriteError(w, tunnelStatus(err), err)
			return
		}
		localapi.WriteJSON(w, struct{}{})
	})
}

func tunnelStatus(err error) int {
	switch {
	case errors.Is(err, tunnel.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, tunnel.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, tunnel.ErrExists), errors.Is(err, tunnel.ErrLimit), errors.Is(err, tunnel.ErrClosed):
		return http.StatusConflict
	case errors.Is(err, client.ErrInvalid):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}
