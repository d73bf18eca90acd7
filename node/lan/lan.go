package lan

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/discovery/mdns"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// Service is the DNS-SD service type overlayd nodes advertise and browse
// for. It is overlayd's own, so that overlayd nodes neither answer nor dial
// the peers of other libp2p applications (Kubo uses go-libp2p's default,
// "_p2p._udp").
const Service = "_overlayd._udp"

// Config is what Run needs of the node.
type Config struct {
	// Host is the node's libp2p host: mDNS advertises its addresses, and
	// the peers found are dialled on it.
	Host host.Host
	// On is the operator's choice (--mdns).
	On bool
	// Bootstrap: the node has bootstrap peers. It then neither uses mDNS
	// nor gives the join hint.
	Bootstrap bool
	// HintAfter is how long a node without bootstrap peers waits, with
	// no peer at all, before it logs how to join a network.
	HintAfter time.Duration
	// Now is the node's clock.
	Now func() time.Time
	// Log receives what discovery does.
	Log *slog.Logger
}

// Usable reports whether a node with cfg runs mDNS, and why not.
func Usable(cfg Config) (bool, string) {
	switch {
	case !cfg.On:
		return false, "mDNS is off (--mdns=false)"
	case cfg.Bootstrap:
		return false, "the node has bootstrap peers"
	}
	addrs, err := cfg.Host.Network().InterfaceListenAddresses()
	if err != nil {
		return false, fmt.Sprintf("no listen addresses: %v", err)
	}
	if !slices.ContainsFunc(addrs, reachable) {
		return false, "the node listens on loopback addresses only"
	}
	return true, ""
}

// reachable reports whether a is an IP address other hosts may reach: not
// loopback, not unspecified, not a relay address.
func reachable(a ma.Multiaddr) bool {
	ip, err := manet.ToIP(a)
	return err == nil && !ip.IsLoopback() && !ip.IsUnspecified()
}

// Run runs mDNS discovery (when Usable) and dials the peers found, within
// the bounds of the package doc, until ctx is done; the mDNS service stops
// before it returns. A node without bootstrap peers that has no peer at
// all after cfg.HintAfter logs, once, how to join a network. Run returns
// at once when it has neither to do.
func Run(ctx context.Context, cfg Config) {
	var hint <-chan time.Time
	if !cfg.Bootstrap {
		t := time.NewTimer(cfg.HintAfter)
		defer t.Stop()
		hint = t.C
	}
	use, why := Usable(cfg)
	var tick <-chan time.Time
	nf := &notifee{self: cfg.Host.ID(), now: cfg.Now, wake: make(chan struct{}, 1), peers: newPeers()}
	if use {
		svc := mdns.NewMdnsService(cfg.Host, Service, nf)
		if err := svc.Start(); err != nil {
			use, why = false, fmt.Sprintf("mDNS failed to start: %v", err)
			cfg.Log.Warn("mdns: not started; peers on the local network will not be found", "err", err)
		} else {
			defer svc.Close()
			cfg.Log.Info("mdns: looking for overlayd peers on the local network", "service", Service)
			t := time.NewTicker(spacing)
			defer t.Stop()
			tick = t.C
		}
	} else if cfg.On {
		cfg.Log.Debug("mdns: not used", "why", why)
	}
	if hint == nil && tick == nil {
		return
	}
	joined := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-hint:
			hint = nil
			if len(cfg.Host.Network().Peers()) == 0 {
				joinHint(cfg, use, why, nf.knownCount())
			}
			if tick == nil {
				return
			}
			continue
		case <-tick:
		case <-nf.wake:
		}
		if ok := dial(ctx, cfg, nf); ok && !joined {
			joined = true
			cfg.Log.Info("mdns: connected to a peer found on the local network")
		}
	}
}

// dial makes at most one connection attempt, if the bounds allow one, and
// reports whether it succeeded.
func dial(ctx context.Context, cfg Config, nf *notifee) bool {
	connected := func(id peer.ID) bool { return cfg.Host.Network().Connectedness(id) == network.Connected }
	nf.mu.Lock()
	ai, ok := nf.peers.next(cfg.Now(), connected)
	nf.mu.Unlock()
	if !ok {
		return false
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	err := cfg.Host.Connect(dctx, ai)
	cancel()
	if ctx.Err() != nil {
		return false
	}
	nf.mu.Lock()
	nf.peers.done(ai.ID, err == nil, cfg.Now())
	nf.mu.Unlock()
	if err != nil {
		cfg.Log.Debug("mdns: dial failed", "peer", ai.ID.ShortString(), "err", err)
		return false
	}
	cfg.Log.Debug("mdns: connected", "peer", ai.ID.ShortString())
	return true
}

// JoinHintPrefix starts the message that tells the operator of a node
// alone how to join a network.
const JoinHintPrefix = "no peers: this node is alone"

// joinHint tells the operator of a node alone how to join a network.
// mdnsOn is whether mDNS runs (why says why not), found how many peers it
// found (none of which could be dialled).
func joinHint(cfg Config, mdnsOn bool, why string, found int) {
	lan := "mDNS found no overlayd peer on the local network"
	if found > 0 {
		lan = fmt.Sprintf("mDNS found %d overlayd peers on the local network but could not connect to any", found)
	}
	if !mdnsOn {
		lan = "no peer is looked for on the local network: " + why
	}
	var self []string
	for _, a := range cfg.Host.Addrs() {
		if reachable(a) {
			self = append(self, fmt.Sprintf("%s/p2p/%s", a, cfg.Host.ID()))
		}
	}
	cfg.Log.Info(JoinHintPrefix+". To join a network, give it the address of a running node: "+
		"`overlayd run --bootstrap /ip4/203.0.113.7/tcp/4101/p2p/12D3KooW...` "+
		"(`overlayd status` on that node lists its addresses); other nodes can join through this one the same way",
		"why", "no --bootstrap peers, and "+lan, "join_through", self)
}
