package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/node/circuit"
	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/node/localapi"
)

// Reaching a peer through its supernode's relay: the locate protocol (a
// client asks its supernode where a peer is attached) and ping.

// maxPingCount bounds the pings of one request.
const maxPingCount = 20

// addrsOf returns the addresses of supernode p: this node's own, or the
// directory's.
func (n *Node) addrsOf(p peer.ID) []ma.Multiaddr {
	if p == n.ID() {
		return n.host.Addrs()
	}
	if e, ok := n.dir.Snapshot().Get(p); ok {
		return e.Addrs
	}
	return nil
}

// Locate returns the supernode target is attached to and its addresses:
// a supernode looks in its presence records; an ordinary node asks its
// own supernode. It fails with client.ErrNotLocated when no supernode
// knows target.
func (n *Node) Locate(ctx context.Context, target peer.ID) (peer.AddrInfo, error) {
	if n.router != nil && n.serving.Load() {
		loc, ok := n.router.Locate(target)
		if !ok {
			return peer.AddrInfo{}, client.ErrNotLocated
		}
		return peer.AddrInfo{ID: loc, Addrs: n.addrsOf(loc)}, nil
	}
	if n.client == nil {
		return peer.AddrInfo{}, client.ErrNotAttached
	}
	ai, err := n.client.Locate(ctx, target)
	if err == nil && len(ai.Addrs) == 0 {
		ai.Addrs = n.addrsOf(ai.ID)
	}
	return ai, err
}

// Ping pings target count times and reports the path. When this node has
// no direct connection to target it locates target's supernode and
// connects through that supernode's relay (a limited connection), pings
// over it, then waits up to wait for hole punching (DCUtR) to open a
// direct connection and, if it does, pings again over that.
func (n *Node) Ping(ctx context.Context, target peer.ID, count int, wait time.Duration) (localapi.PingResponse, error) {
	res := localapi.PingResponse{Peer: target.String()}
	if target == n.ID() {
		return res, fmt.Errorf("%w: cannot ping self", client.ErrInvalid)
	}
	count = min(max(count, 1), maxPingCount)
	h := n.host
	lctx := network.WithAllowLimitedConn(ctx, "overlayd ping")
	if !hasDirectConn(h.Network(), target) {
		relay, err := n.Locate(ctx, target)
		if err != nil {
			return res, err
		}
		res.Relay = relay.ID.String()
		if relay.ID != n.ID() {
			h.Peerstore().AddAddrs(relay.ID, relay.Addrs, time.Hour)
		}
		addrs := circuit.Through(relay)
		t0 := time.Now()
		if err := h.Connect(lctx, peer.AddrInfo{ID: target, Addrs: addrs}); err != nil {
			return res, fmt.Errorf("connect through relay %s: %w", relay.ID.ShortString(), err)
		}
		res.ConnectMs = ms(time.Since(t0))
	}
	rtts, conn, err := pingN(lctx, n, target, count)
	if err != nil {
		return res, err
	}
	res.RTTMs, res.Addr = rtts, conn.RemoteMultiaddr().String()
	res.Path = "direct"
	if conn.Stat().Limited {
		res.Path = "relayed"
	}
	if res.Path == "direct" || wait <= 0 {
		return res, nil
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for !hasDirectConn(h.Network(), target) {
		select {
		case <-ctx.Done():
			return res, nil
		case <-deadline.C:
			return res, nil
		case <-tick.C:
		}
	}
	res.BecameDirect = true
	drtts, dconn, err := pingN(ctx, n, target, count)
	if err != nil {
		return res, nil // the relayed pings stand
	}
	res.DirectRTTMs, res.DirectAddr = drtts, dconn.RemoteMultiaddr().String()
	return res, nil
}

func hasDirectConn(nw network.Network, p peer.ID) bool {
	for _, c := range nw.ConnsToPeer(p) {
		if !c.Stat().Limited {
			return true
		}
	}
	return false
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pingN runs count libp2p pings on one stream (the host picks the best
// connection: a direct one before a limited one) and returns the round
// trips and the connection used.
func pingN(ctx context.Context, n *Node, target peer.ID, count int) ([]float64, network.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := n.host.NewStream(ctx, target, ping.ID)
	if err != nil {
		return nil, nil, fmt.Errorf("ping: open stream: %w", err)
	}
	defer s.Close()
	if err := s.Scope().SetService(ping.ServiceName); err != nil {
		s.Reset()
		return nil, nil, fmt.Errorf("ping: %w", err)
	}
	dl, _ := ctx.Deadline()
	_ = s.SetDeadline(dl)
	out := make([]float64, 0, count)
	buf, got := make([]byte, ping.PingSize), make([]byte, ping.PingSize)
	for range count {
		_, _ = rand.Read(buf)
		t0 := time.Now()
		if _, err := s.Write(buf); err != nil {
			s.Reset()
			return nil, nil, fmt.Errorf("ping: write: %w", err)
		}
		if _, err := io.ReadFull(s, got); err != nil {
			s.Reset()
			return nil, nil, fmt.Errorf("ping: read: %w", err)
		}
		if !bytes.Equal(buf, got) {
			s.Reset()
			return nil, nil, errors.New("ping: wrong echo")
		}
		out = append(out, ms(time.Since(t0)))
	}
	return out, s.Conn(), nil
}
