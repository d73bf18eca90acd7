package lan

import (
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/discovery/mdns"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// Bounds of dialling (see the package doc).
const (
	want        = 4
	knownMax    = 256
	perMinute   = 12
	spacing     = time.Second
	retryMin    = 30 * time.Second
	retryMax    = 10 * time.Minute
	dialTimeout = 10 * time.Second
)

// found is one peer the resolver reported.
type found struct {
	addrs   []ma.Multiaddr
	seen    time.Time     // last reported by the resolver
	next    time.Time     // no attempt before
	backoff time.Duration // wait after the next attempt
}

// peers is the pure core of dialling: the peers found and the recent
// attempts. It decides what to dial; the caller dials. Not safe for
// concurrent use.
type peers struct {
	known    map[peer.ID]*found
	attempts []time.Time // starts of the attempts of the last minute, oldest first
}

func newPeers() *peers { return &peers{known: map[peer.ID]*found{}} }

// found records a peer the resolver reported; it reports whether the peer
// is new. A known peer's addresses are replaced (it may have moved), its
// backoff kept. With knownMax peers known, the one seen longest ago makes
// room.
func (p *peers) found(ai peer.AddrInfo, now time.Time) bool {
	if k, ok := p.known[ai.ID]; ok {
		k.addrs, k.seen = ai.Addrs, now
		return false
	}
	if len(p.known) >= knownMax {
		var oldest peer.ID
		for id, k := range p.known {
			if oldest == "" || k.seen.Before(p.known[oldest].seen) {
				oldest = id
			}
		}
		delete(p.known, oldest)
	}
	p.known[ai.ID] = &found{addrs: ai.Addrs, seen: now, next: now, backoff: retryMin}
	return true
}

// next returns the peer to dial now, if any, and counts the attempt: none
// while want known peers are connected, while the attempt budget of the
// last minute is spent or the last attempt is under spacing old, or while
// every unconnected peer waits out its backoff. Of the others it picks the
// one due longest ago.
func (p *peers) next(now time.Time, connected func(peer.ID) bool) (peer.AddrInfo, bool) {
	i := 0
	for i < len(p.attempts) && !p.attempts[i].After(now.Add(-time.Minute)) {
		i++
	}
	p.attempts = p.attempts[i:]
	if len(p.attempts) >= perMinute ||
		(len(p.attempts) > 0 && now.Sub(p.attempts[len(p.attempts)-1]) < spacing) {
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
	if pick == "" || conns >= want {
		return peer.AddrInfo{}, false
	}
	k := p.known[pick]
	p.attempts = append(p.attempts, now)
	k.next = now.Add(k.backoff)
	return peer.AddrInfo{ID: pick, Addrs: slices.Clone(k.addrs)}, true
}

// done records how an attempt on id ended: a success resets the peer's
// backoff (it is dialled again, if it disconnects, after retryMin), a
// failure doubles it up to retryMax.
func (p *peers) done(id peer.ID, ok bool, now time.Time) {
	k, known := p.known[id]
	if !known {
		return
	}
	if ok {
		k.backoff = retryMin
	} else {
		k.backoff = min(2*k.backoff, retryMax)
	}
	k.next = now.Add(k.backoff)
}

// notifee receives the resolver's reports. go-libp2p calls HandlePeerFound
// on a goroutine of its own per report, which it does not wait for: it
// only records the peer and wakes the loop.
type notifee struct {
	self peer.ID
	now  func() time.Time
	wake chan struct{} // capacity 1

	mu    sync.Mutex
	peers *peers
}

var _ mdns.Notifee = (*notifee)(nil)

// HandlePeerFound implements mdns.Notifee.
func (m *notifee) HandlePeerFound(ai peer.AddrInfo) {
	if ai.ID == m.self || ai.ID == "" {
		return
	}
	addrs := make([]ma.Multiaddr, 0, len(ai.Addrs))
	for _, a := range ai.Addrs {
		// A peer's loopback address leads back to this host: on a LAN
		// that is this node itself, or another peer than the one named.
		if !manet.IsIPLoopback(a) {
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

// knownCount is how many peers the resolver reported, for the join hint.
func (m *notifee) knownCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.peers.known)
}
