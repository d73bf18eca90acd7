package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/discovery/mdns"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// Zero-configuration discovery on the local network (Config.MDNS).
//
// A node without bootstrap peers advertises itself by multicast DNS under
// MDNSService and browses for others (go-libp2p p2p/discovery/mdns). It
// dials a few of the peers it finds; the directory then reaches it over
// GossipSub on those connections, as it does through a bootstrap peer,
// and the client attaches to the supernodes it learns of. Dialling is
// bounded so that a LAN full of overlayd nodes cannot make a node dial
// storm: at most mdnsPerMinute attempts in any minute, mdnsSpacing apart,
// one at a time, none while mdnsWant peers found by mDNS are connected,
// and a failed peer is retried only after a doubling backoff. The peers
// found are remembered, up to mdnsKnownMax, because the mDNS resolver
// reports a peer once per record lifetime (an hour), not once per query.
//
// A node whose listen addresses are all loopback does not use mDNS: it has
// nothing to offer the local network (and the in-process tests and
// testnets, which listen on 127.0.0.1, stay apart from each other and
// from any other overlayd on the machine).

// MDNSService is the DNS-SD service type overlayd nodes advertise and
// browse for. It is overlayd's own, so that overlayd nodes neither answer
// nor dial the peers of other libp2p applications (Kubo uses go-libp2p's
// default, "_p2p._udp").
const MDNSService = "_overlayd._udp"

// Bounds of mDNS dialling (see above).
const (
	mdnsWant        = 4
	mdnsKnownMax    = 256
	mdnsPerMinute   = 12
	mdnsSpacing     = time.Second
	mdnsRetryMin    = 30 * time.Second
	mdnsRetryMax    = 10 * time.Minute
	mdnsDialTimeout = 10 * time.Second
)

// WithMDNSForTest makes the node use service instead of MDNSService, and
// use mDNS even when it listens on loopback only (advertising, and
// dialling, 127.0.0.1 addresses): tests on one machine then find each
// other, and only each other. Config.MDNS must still be true.
func WithMDNSForTest(service string) Option {
	return func(n *Node) error {
		if service == "" {
			return errors.New("WithMDNSForTest: empty service name")
		}
		n.mdnsService = service
		return nil
	}
}

// mdnsPeer is one peer found by mDNS.
type mdnsPeer struct {
	addrs   []ma.Multiaddr
	seen    time.Time     // last reported by the resolver
	next    time.Time     // no attempt before
	backoff time.Duration // wait after the next attempt
}

// mdnsPeers is the pure core of mDNS dialling: the peers found and the
// recent attempts. It decides what to dial; the caller dials. Not safe for
// concurrent use.
type mdnsPeers struct {
	known    map[peer.ID]*mdnsPeer
	attempts []time.Time // starts of the attempts of the last minute, oldest first
}

func newMDNSPeers() *mdnsPeers { return &mdnsPeers{known: map[peer.ID]*mdnsPeer{}} }

// found records a peer the resolver reported; it reports whether the peer
// is new. A known peer's addresses are replaced (it may have moved), its
// backoff kept. With mdnsKnownMax peers known, the one seen longest ago
// makes room.
func (p *mdnsPeers) found(ai peer.AddrInfo, now time.Time) bool {
	if k, ok := p.known[ai.ID]; ok {
		k.addrs, k.seen = ai.Addrs, now
		return false
	}
	if len(p.known) >= mdnsKnownMax {
		var oldest peer.ID
		for id, k := range p.known {
			if oldest == "" || k.seen.Before(p.known[oldest].seen) {
				oldest = id
			}
		}
		delete(p.known, oldest)
	}
	p.known[ai.ID] = &mdnsPeer{addrs: ai.Addrs, seen: now, next: now, backoff: mdnsRetryMin}
	return true
}

// next returns the peer to dial now, if any, and counts the attempt: none
// while mdnsWant known peers are connected, while the attempt budget of the
// last minute is spent or the last attempt is under mdnsSpacing old, or
// while every unconnected peer waits out its backoff. Of the others it
// picks the one due longest ago.
func (p *mdnsPeers) next(now time.Time, connected func(peer.ID) bool) (peer.AddrInfo, bool) {
	i := 0
	for i < len(p.attempts) && !p.attempts[i].After(now.Add(-time.Minute)) {
		i++
	}
	p.attempts = p.attempts[i:]
	if len(p.attempts) >= mdnsPerMinute ||
		(len(p.attempts) > 0 && now.Sub(p.attempts[len(p.attempts)-1]) < mdnsSpacing) {
		return peer.AddrInfo{}, false
	}
	var pick peer.ID
	conns := 0
	for id, k := range p.known {
		if connected(id) {
			conns++
			continue
		}
		if k.next.After(now) {
			continue
		}
		if pick == "" || k.next.Before(p.known[pick].next) ||
			(k.next.Equal(p.known[pick].next) && id < pick) {
			pick = id
		}
	}
	if pick == "" || conns >= mdnsWant {
		return peer.AddrInfo{}, false
	}
	k := p.known[pick]
	p.attempts = append(p.attempts, now)
	k.next = now.Add(k.backoff)
	return peer.AddrInfo{ID: pick, Addrs: slices.Clone(k.addrs)}, true
}

// done records how an attempt on id ended: a success resets the peer's
// backoff (it is dialled again, if it disconnects, after mdnsRetryMin), a
// failure doubles it up to mdnsRetryMax.
func (p *mdnsPeers) done(id peer.ID, ok bool, now time.Time) {
	k, found := p.known[id]
	if !found {
		return
	}
	if ok {
		k.backoff = mdnsRetryMin
	} else {
		k.backoff = min(2*k.backoff, mdnsRetryMax)
	}
	k.next = now.Add(k.backoff)
}

// mdnsNotifee receives the resolver's reports. go-libp2p calls
// HandlePeerFound on a goroutine of its own per report, which it does not
// wait for: it only records the peer and wakes the loop.
type mdnsNotifee struct {
	self     peer.ID
	loopback bool // keep loopback addresses (WithMDNSForTest)
	now      func() time.Time
	wake     chan struct{} // capacity 1

	mu    sync.Mutex
	peers *mdnsPeers
}

var _ mdns.Notifee = (*mdnsNotifee)(nil)

// HandlePeerFound implements mdns.Notifee.
func (m *mdnsNotifee) HandlePeerFound(ai peer.AddrInfo) {
	if ai.ID == m.self || ai.ID == "" {
		return
	}
	addrs := make([]ma.Multiaddr, 0, len(ai.Addrs))
	for _, a := range ai.Addrs {
		// A peer's loopback address leads back to this host: on a LAN
		// that is this node itself, or another peer than the one named.
		if m.loopback || !manet.IsIPLoopback(a) {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return
	}
	m.mu.Lock()
	m.peers.found(peer.AddrInfo{ID: ai.ID, Addrs: addrs}, m.now())
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// mdnsUsable reports whether the node runs mDNS, and why not.
func (n *Node) mdnsUsable() (bool, string) {
	switch {
	case !n.cfg.MDNS:
		return false, "mDNS is off (--mdns=false)"
	case len(n.bootstrap) > 0:
		return false, "the node has bootstrap peers"
	case n.mdnsService != "":
		return true, ""
	}
	addrs, err := n.host.Network().InterfaceListenAddresses()
	if err != nil {
		return false, fmt.Sprintf("no listen addresses: %v", err)
	}
	if !slices.ContainsFunc(addrs, lanAddr) {
		return false, "the node listens on loopback addresses only"
	}
	return true, ""
}

// lanAddr reports whether a is an IP address other hosts may reach: not
// loopback, not a relay address.
func lanAddr(a ma.Multiaddr) bool {
	ip, err := manet.ToIP(a)
	return err == nil && !ip.IsLoopback() && !ip.IsUnspecified()
}

// mdnsLoop runs mDNS discovery (when the node uses it) and dials the peers
// found, within the bounds above, until ctx is done; the mDNS service stops
// before it returns. A node without bootstrap peers that has no peer at all
// after two announce intervals logs, once, how to join a network.
func (n *Node) mdnsLoop(ctx context.Context) {
	var hint <-chan time.Time
	if len(n.bootstrap) == 0 {
		t := time.NewTimer(2 * n.cfg.AnnounceInterval)
		defer t.Stop()
		hint = t.C
	}
	use, why := n.mdnsUsable()
	var tick <-chan time.Time
	nf := &mdnsNotifee{self: n.host.ID(), loopback: n.mdnsService != "", now: n.now,
		wake: make(chan struct{}, 1), peers: newMDNSPeers()}
	if use {
		service := MDNSService
		if n.mdnsService != "" {
			service = n.mdnsService
		}
		svc := mdns.NewMdnsService(n.host, service, nf)
		if err := svc.Start(); err != nil {
			use, why = false, fmt.Sprintf("mDNS failed to start: %v", err)
			n.log.Warn("mdns: not started; peers on the local network will not be found", "err", err)
		} else {
			defer svc.Close()
			n.log.Info("mdns: looking for overlayd peers on the local network", "service", service)
			t := time.NewTicker(mdnsSpacing)
			defer t.Stop()
			tick = t.C
		}
	} else if n.cfg.MDNS {
		n.log.Debug("mdns: not used", "why", why)
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
			if len(n.host.Network().Peers()) == 0 {
				nf.mu.Lock()
				found := len(nf.peers.known)
				nf.mu.Unlock()
				n.joinHint(use, why, found)
			}
			if tick == nil {
				return
			}
			continue
		case <-tick:
		case <-nf.wake:
		}
		if ok := n.mdnsDial(ctx, nf); ok && !joined {
			joined = true
			n.log.Info("mdns: connected to a peer found on the local network")
		}
	}
}

// mdnsDial makes at most one connection attempt, if the bounds allow one,
// and reports whether it succeeded.
func (n *Node) mdnsDial(ctx context.Context, nf *mdnsNotifee) bool {
	connected := func(id peer.ID) bool { return n.host.Network().Connectedness(id) == network.Connected }
	nf.mu.Lock()
	ai, ok := nf.peers.next(n.now(), connected)
	nf.mu.Unlock()
	if !ok {
		return false
	}
	dctx, cancel := context.WithTimeout(ctx, mdnsDialTimeout)
	err := n.host.Connect(dctx, ai)
	cancel()
	if ctx.Err() != nil {
		return false
	}
	nf.mu.Lock()
	nf.peers.done(ai.ID, err == nil, n.now())
	nf.mu.Unlock()
	if err != nil {
		n.log.Debug("mdns: dial failed", "peer", ai.ID.ShortString(), "err", err)
		return false
	}
	n.log.Debug("mdns: connected", "peer", ai.ID.ShortString())
	return true
}

// joinHint tells the operator of a node alone how to join a network.
// found is how many peers mDNS found (none of them could be dialled).
func (n *Node) joinHint(mdnsOn bool, why string, found int) {
	lan := "mDNS found no overlayd peer on the local network"
	if found > 0 {
		lan = fmt.Sprintf("mDNS found %d overlayd peers on the local network but could not connect to any", found)
	}
	if !mdnsOn {
		lan = "no peer is looked for on the local network: " + why
	}
	var self []string
	for _, a := range n.host.Addrs() {
		if lanAddr(a) {
			self = append(self, fmt.Sprintf("%s/p2p/%s", a, n.host.ID()))
		}
	}
	n.log.Info("no peers: this node is alone. To join a network, give it the address of a running node: "+
		"`overlayd run --bootstrap /ip4/203.0.113.7/tcp/4101/p2p/12D3KooW...` "+
		"(`overlayd status` on that node lists its addresses); other nodes can join through this one the same way",
		"why", "no --bootstrap peers, and "+lan, "join_through", self)
}
