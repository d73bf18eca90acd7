package node

import (
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
)

// connBudget is how many connections a node expects to hold: its clients
// when it serves as a supernode, plus headroom for other supernodes, its own
// cluster and transient dials.
func connBudget(c Config) int {
	const headroom = 256
	if c.Role == RoleOrdinary {
		return headroom
	}
	return 2*c.Capacity + headroom
}

// newHost builds the libp2p host: TCP and QUIC on the configured addresses
// only, an explicit resource manager and a connection manager whose
// watermarks sit below the resource limits (so trimming can happen; see
// go-libp2p issue 1640).
func newHost(c Config, key crypto.PrivKey) (host.Host, error) {
	listen, err := parseAddrs("--listen", c.Listen)
	if err != nil {
		return nil, err
	}
	budget := connBudget(c)
	scaled := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&scaled)
	limits := rcmgr.PartialLimitConfig{
		System: rcmgr.ResourceLimits{
			Conns:         rcmgr.LimitVal(budget),
			ConnsInbound:  rcmgr.LimitVal(budget),
			ConnsOutbound: rcmgr.LimitVal(budget),
			Streams:       rcmgr.LimitVal(16 * budget),
			FD:            rcmgr.LimitVal(budget + 64),
		},
		Transient: rcmgr.ResourceLimits{
			Conns:        rcmgr.LimitVal(budget / 2),
			ConnsInbound: rcmgr.LimitVal(budget / 2),
		},
	}.Build(scaled.AutoScale())
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits))
	if err != nil {
		return nil, fmt.Errorf("resource manager: %w", err)
	}
	low, high := budget*3/4, budget*7/8
	cm, err := connmgr.NewConnManager(low, high, connmgr.WithGracePeriod(time.Minute))
	if err != nil {
		rm.Close()
		return nil, fmt.Errorf("connection manager: %w", err)
	}
	h, err := libp2p.New(
		libp2p.Identity(key),
		libp2p.ListenAddrs(listen...),
		libp2p.NoTransports,
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Transport(quic.NewTransport),
		libp2p.ResourceManager(rm),
		libp2p.ConnectionManager(cm),
		libp2p.DisableMetrics(),
	)
	if err != nil {
		cm.Close()
		rm.Close()
		return nil, fmt.Errorf("libp2p host: %w", err)
	}
	return h, nil
}
