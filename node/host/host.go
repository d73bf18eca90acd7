package host

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/libp2p/go-libp2p"
	coreconnmgr "github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/crypto"
	corehost "github.com/libp2p/go-libp2p/core/host"
	p2pmetrics "github.com/libp2p/go-libp2p/core/metrics"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	circuitproto "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/proto"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	xrate "github.com/libp2p/go-libp2p/x/rate"

	"github.com/overlayd/overlayd/node/circuit"
	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/node/version"
	overlayproto "github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/supernode"
)

// reachabilityOptions are the host's NAT-traversal options. Every node
// learns its reachability with AutoNAT v2 (which also makes it serve v2
// dial-back requests, rate-limited by go-libp2p: 60 a minute, 12 per peer)
// and upgrades relayed connections with hole punching (DCUtR). Supernodes,
// and auto nodes that may become one, also serve AutoNAT v1, which older
// peers and go-libp2p's v1 client still use, at a bounded rate. The relay
// transport (dialing and accepting circuits) is on by default.
func reachabilityOptions(c config.Config) []libp2p.Option {
	opts := []libp2p.Option{
		libp2p.EnableAutoNATv2(),
		libp2p.EnableHolePunching(),
	}
	if c.Role != config.RoleOrdinary {
		opts = append(opts,
			libp2p.EnableNATService(),
			libp2p.AutoNATServiceRateLimit(60, 4, time.Minute))
	}
	return opts
}

// New builds the libp2p host: TCP and QUIC on the configured addresses
// only, an explicit resource manager and a connection manager whose
// watermarks sit below the resource limits (so trimming can happen; see
// go-libp2p issue 1640).
//
// bw, if not nil, is the host's bandwidth reporter: the relay budgets
// (circuit.Budgets) count relayed bytes per peer with it.
func New(c config.Config, key crypto.PrivKey, gater coreconnmgr.ConnectionGater, bw p2pmetrics.Reporter) (corehost.Host, network.ResourceManager, error) {
	listen, err := c.ListenAddrs()
	if err != nil {
		return nil, nil, err
	}
	budget := c.ConnBudget()
	scaled := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&scaled)
	attachStreams := rcmgr.LimitVal(budget)
	svc := rcmgr.ResourceLimits{
		StreamsInbound:  attachStreams,
		StreamsOutbound: attachStreams,
		Streams:         2 * attachStreams,
	}
	relaySvc, relayProto := circuit.ResourceLimits(c.RelaySettings(), c.Capacity)
	limits := rcmgr.PartialLimitConfig{
		System: rcmgr.ResourceLimits{
			Conns:           rcmgr.LimitVal(budget),
			ConnsInbound:    rcmgr.LimitVal(budget),
			ConnsOutbound:   rcmgr.LimitVal(budget),
			Streams:         rcmgr.LimitVal(16 * budget),
			StreamsInbound:  rcmgr.LimitVal(8 * budget),
			StreamsOutbound: rcmgr.LimitVal(8 * budget),
			FD:              rcmgr.LimitVal(budget + 64),
		},
		// Connections and streams in their handshake are transient; a
		// surge of refused clients lives here briefly.
		Transient: rcmgr.ResourceLimits{
			Conns:          rcmgr.LimitVal(budget),
			ConnsInbound:   rcmgr.LimitVal(budget),
			Streams:        rcmgr.LimitVal(budget),
			StreamsInbound: rcmgr.LimitVal(budget),
		},
		Service: map[string]rcmgr.ResourceLimits{
			supernode.AttachService: svc,
			relay.ServiceName:       relaySvc,
		},
		ServicePeer: map[string]rcmgr.ResourceLimits{supernode.AttachService: {StreamsInbound: 4, StreamsOutbound: 4, Streams: 8}},
		Protocol: map[protocol.ID]rcmgr.ResourceLimits{
			overlayproto.AttachID:      svc,
			circuitproto.ProtoIDv2Hop:  relayProto,
			circuitproto.ProtoIDv2Stop: relayProto,
		},
	}.Build(scaled.AutoScale())
	// Per-IP limits: libp2p allows 8 connections and 0.2 new connections/s
	// per IPv4 address by default (loopback is exempt). Many peers behind
	// one NAT address need more: --conns-per-ip.
	perIP := []rcmgr.ConnLimitPerSubnet{{PrefixLength: 32, ConnCount: c.ConnsPerIP}}
	perIP6 := []rcmgr.ConnLimitPerSubnet{{PrefixLength: 56, ConnCount: c.ConnsPerIP}, {PrefixLength: 48, ConnCount: 8 * c.ConnsPerIP}}
	rate := &xrate.Limiter{
		NetworkPrefixLimits: []xrate.PrefixLimit{
			{Prefix: netip.MustParsePrefix("127.0.0.0/8"), Limit: xrate.Limit{}},
			{Prefix: netip.MustParsePrefix("::1/128"), Limit: xrate.Limit{}},
		},
		SubnetRateLimiter: xrate.SubnetLimiter{
			IPv4SubnetLimits: []xrate.SubnetLimit{{PrefixLength: 32, Limit: xrate.Limit{RPS: float64(c.ConnsPerIP) / 40, Burst: 2 * c.ConnsPerIP}}},
			IPv6SubnetLimits: []xrate.SubnetLimit{{PrefixLength: 56, Limit: xrate.Limit{RPS: float64(c.ConnsPerIP) / 40, Burst: 2 * c.ConnsPerIP}}},
			GracePeriod:      time.Minute,
		},
	}
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits),
		rcmgr.WithLimitPerSubnet(perIP, perIP6),
		rcmgr.WithConnRateLimiters(rate),
		rcmgr.WithMetricsDisabled())
	if err != nil {
		return nil, nil, fmt.Errorf("resource manager: %w", err)
	}
	low, high := budget*3/4, budget*7/8
	cm, err := connmgr.NewConnManager(low, high, connmgr.WithGracePeriod(time.Minute))
	if err != nil {
		rm.Close()
		return nil, nil, fmt.Errorf("connection manager: %w", err)
	}
	opts := []libp2p.Option{
		libp2p.Identity(key),
		libp2p.ListenAddrs(listen...),
		libp2p.NoTransports,
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Transport(quic.NewTransport),
		libp2p.ResourceManager(rm),
		libp2p.ConnectionManager(cm),
		libp2p.DisableMetrics(),
		// identify tells peers what runs here: overlayd/<version>.
		libp2p.UserAgent(version.Build().UserAgent()),
	}
	if gater != nil {
		opts = append(opts, libp2p.ConnectionGater(gater))
	}
	if bw != nil {
		opts = append(opts, libp2p.BandwidthReporter(bw))
	}
	opts = append(opts, reachabilityOptions(c)...)
	h, err := libp2p.New(opts...)
	if err != nil {
		cm.Close()
		rm.Close()
		return nil, nil, fmt.Errorf("libp2p host: %w", err)
	}
	return h, rm, nil
}
