package circuit

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"

	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/node/localapi"
)

// Reaching a peer through its supernode's relay: ping, over the locate
// protocol (a client asks its supernode where a peer is attached).

// maxPingCount bounds the pings of one request.
const maxPingCount = 20

// Locator finds the supernode a peer is attached to, with its addresses:
// the node's Locate (its own presence records while it serves, else its
// supernode's answer). It fails with client.ErrNotLocated when no
// supernode knows the peer.
type Locator interface {
	Locate(ctx context.Context, target peer.ID) (peer.AddrInfo, error)
}

// Pinger pings peers from Host, through the relay of the supernode
// Locator names when there is no direct connection.
type Pinger struct {
	Host    host.Host
	Locator Locator
}

// Ping pings target count times and reports the path. When this node has
// no direct connection to target it locates target's supernode and
// connects through that supernode's relay (a limited connection), pings
// over it, then waits up to wait for hole punching (DCUtR) to open a
// direct connection and, if it does, pings again over that.
func (p Pinger) Ping(ctx context.Context, target peer.ID, count int, wait time.Duration) (localapi.PingResponse, error) {
	res := localapi.PingResponse{Peer: target.String()}
	if target == p.Host.ID() {
		return res, fmt.Errorf("%w: cannot ping self", client.ErrInvalid)
	}
	count = min(max(count, 1), maxPingCount)
	h := p.Host
	lctx := network.WithAllowLimitedConn(ctx, "overlayd ping")
	if !hasDirectConn(h.Network(), target) {
		relay, err := p.Locator.Locate(ctx, target)
		if err != nil {
			return res, err
		}
		res.Relay = relay.ID.String()
		if relay.ID != h.ID() {
			h.Peerstore().AddAddrs(relay.ID, relay.Addrs, time.Hour)
		}
		addrs := Through(relay)
		t0 := time.Now()
		if err := h.Connect(lctx, peer.AddrInfo{ID: target, Addrs: addrs}); err != nil {
			return res, fmt.Errorf("connect through relay %s: %w", relay.ID.ShortString(), err)
		}
		res.ConnectMs = ms(time.Since(t0))
	}
	rtts, conn, err := pingN(lctx, h, target, count)
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
	drtts, dconn, err := pingN(ctx, h, target, count)
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
func pingN(ctx context.Context, h host.Host, target peer.ID, count int) ([]float64, network.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := h.NewStream(ctx, target, ping.ID)
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
