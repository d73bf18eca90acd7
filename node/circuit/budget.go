package circuit

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	p2pmetrics "github.com/libp2p/go-libp2p/core/metrics"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	circuitproto "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/proto"
)

// Per-peer budgets on relayed traffic.
//
// go-libp2p's circuit relay v2 bounds each circuit (RelayLimit: bytes per
// direction, lifetime) and, through overlayd's ACL, the circuits in
// progress; nothing bounds what one peer gets relayed across circuits. A
// supernode therefore counts the bytes it actually carries per peer: the
// host's bandwidth reporter (Budgets is a p2pmetrics.Reporter) is called
// by the swarm on every read and write of every stream with the stream's
// protocol and remote peer. On the relay a circuit is two streams, the hop
// stream from the peer that opened it and the stop stream to the peer it
// reaches; every relayed byte is read on one and written on the other, so
// each end of a circuit is charged once for every byte relayed either way.
// Two budgets per peer, both token buckets on the node's clock:
//
//   - bytes: --relay-peer-bytes per hour (bucket of that size, refilled
//     over an hour);
//   - rate: --relay-peer-rate bytes/s (bucket of max(2 s of rate, one full
//     circuit), refilled at the rate).
//
// A peer whose bucket goes below zero is over budget: its open relayed
// streams (hop streams it opened, stop streams to it) are reset at once and
// the ACL refuses circuits from or to it (PERMISSION_DENIED) until both
// buckets are back at zero or above. What a peer gets relayed over any span T
// is thus at most bucket + refill×T plus what was in flight when its streams
// were reset (the relay's copy buffers, 2 KiB per direction per circuit).

// Budget kinds, the values of overlayd_relay_budget_cuts_total{budget}.
const (
	budgetBytes = "bytes"
	budgetRate  = "rate"
)

const (
	// budgetWindow is the span --relay-peer-bytes is per.
	budgetWindow = time.Hour
	// rateBurst is how long the rate bucket can run at full speed
	// from full.
	rateBurst = 2 * time.Second
	// Defaults, in units of the per-circuit data limit so that an operator
	// who raises --relay-circuit-data raises them in proportion: 512 ×
	// 128 KiB = 64 MiB an hour (256 full circuits, both directions) and
	// 8 × 128 KiB = 1 MiB/s per peer. Circuits are for address exchange,
	// hole punching, ping and small relayed tunnel transfers until the
	// tunnel moves to a direct connection; a peer that needs more is
	// better served direct.
	peerBytesPerCircuitData = 512
	peerRatePerCircuitData  = 8
	// MinPeerRate is the smallest rate budget accepted (bytes/s).
	MinPeerRate = 1024
	// budgetPeers is how many peers the budgets track before full
	// buckets (peers that relayed nothing lately) are forgotten. Entries
	// exist only for peers with hop or stop streams, which need
	// connections: the resource manager bounds them.
	budgetPeers = 4096
)

// PeerBudgets returns the effective per-peer budgets of s: bytes per
// window and bytes per second, 0 for unlimited.
func (s Settings) PeerBudgets() (bytes, rate int64) {
	data := s.CircuitDataLimit()
	switch {
	case s.PeerBytes == 0:
		bytes = peerBytesPerCircuitData * data
	case s.PeerBytes > 0:
		bytes = s.PeerBytes
	}
	switch {
	case s.PeerRate == 0:
		rate = peerRatePerCircuitData * data
	case s.PeerRate > 0:
		rate = s.PeerRate
	}
	return bytes, rate
}

// tokenBucket holds up to its capacity and refills at perSec.
type tokenBucket struct {
	tokens float64
	last   time.Time
}

func (b *tokenBucket) refill(capacity, perSec float64, now time.Time) {
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(capacity, b.tokens+d.Seconds()*perSec)
	}
	b.last = now
}

// peerBudget is one peer's buckets.
type peerBudget struct {
	bytes, rate tokenBucket
	over        string // the budget that went below zero, "" when within
}

// Budgets counts the bytes the relay carries per peer and enforces
// the budgets. The zero value is inactive (counts nothing); start
// activates it when the relay service starts.
type Budgets struct {
	active atomic.Bool

	mu    sync.Mutex
	now   func() time.Time
	bytes float64 // bucket size of the byte budget, 0: unlimited
	rate  float64 // bytes/s, 0: unlimited
	burst float64 // bucket size of the rate budget
	peers map[peer.ID]*peerBudget
	cut   func(p peer.ID) // resets p's relayed streams; called in its own goroutine
	m     *metrics
}

var _ p2pmetrics.Reporter = (*Budgets)(nil)

// start activates the budgets of s; cut is called (in a goroutine of its
// own) when a peer goes over budget.
func (b *Budgets) start(s Settings, now func() time.Time, m *metrics, cut func(peer.ID)) {
	bytes, rate := s.PeerBudgets()
	b.mu.Lock()
	b.now, b.m, b.cut = now, m, cut
	b.bytes, b.rate = float64(bytes), float64(rate)
	b.burst = max(rateBurst.Seconds()*b.rate, float64(2*s.CircuitDataLimit()))
	b.peers = map[peer.ID]*peerBudget{}
	b.mu.Unlock()
	b.active.Store(bytes > 0 || rate > 0)
}

// stop deactivates the budgets and forgets every peer.
func (b *Budgets) stop() {
	b.active.Store(false)
	b.mu.Lock()
	b.peers = nil
	b.mu.Unlock()
}

// refillLocked brings p's buckets to now and clears its over mark when
// both are back at zero or above.
func (b *Budgets) refillLocked(pb *peerBudget, now time.Time) {
	if b.bytes > 0 {
		pb.bytes.refill(b.bytes, b.bytes/budgetWindow.Seconds(), now)
	}
	if b.rate > 0 {
		pb.rate.refill(b.burst, b.rate, now)
	}
	if pb.over != "" && pb.bytes.tokens >= 0 && pb.rate.tokens >= 0 {
		pb.over = ""
	}
}

// charge counts n bytes relayed for p.
func (b *Budgets) charge(p peer.ID, n int64) {
	if n <= 0 || !b.active.Load() {
		return
	}
	b.mu.Lock()
	if b.peers == nil {
		b.mu.Unlock()
		return
	}
	now := b.now()
	pb := b.peers[p]
	if pb == nil {
		if len(b.peers) >= budgetPeers {
			b.forgetFullLocked(now)
		}
		pb = &peerBudget{bytes: tokenBucket{tokens: b.bytes, last: now}, rate: tokenBucket{tokens: b.burst, last: now}}
		b.peers[p] = pb
	}
	b.refillLocked(pb, now)
	if b.bytes > 0 {
		pb.bytes.tokens -= float64(n)
	}
	if b.rate > 0 {
		pb.rate.tokens -= float64(n)
	}
	var crossed string
	if pb.over == "" {
		switch {
		case pb.bytes.tokens < 0:
			crossed = budgetBytes
		case pb.rate.tokens < 0:
			crossed = budgetRate
		}
		pb.over = crossed
	}
	m, cut := b.m, b.cut
	b.mu.Unlock()
	if crossed != "" {
		if m != nil {
			m.budgetCuts.WithLabelValues(crossed).Inc()
		}
		if cut != nil {
			go cut(p)
		}
	}
}

// forgetFullLocked drops the peers whose buckets are full again.
func (b *Budgets) forgetFullLocked(now time.Time) {
	for p, pb := range b.peers {
		b.refillLocked(pb, now)
		if pb.over == "" && (b.bytes == 0 || pb.bytes.tokens >= b.bytes) && (b.rate == 0 || pb.rate.tokens >= b.burst) {
			delete(b.peers, p)
		}
	}
}

// over returns the budget p is over, "" if none (or inactive).
func (b *Budgets) over(p peer.ID) string {
	if !b.active.Load() {
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	pb := b.peers[p]
	if pb == nil {
		return ""
	}
	b.refillLocked(pb, b.now())
	return pb.over
}

// Relay protocols, the streams the budgets count.
const (
	hopID  = protocol.ID(circuitproto.ProtoIDv2Hop)
	stopID = protocol.ID(circuitproto.ProtoIDv2Stop)
)

func (b *Budgets) LogSentMessageStream(n int64, proto protocol.ID, p peer.ID) {
	if proto == hopID || proto == stopID {
		b.charge(p, n)
	}
}

func (b *Budgets) LogRecvMessageStream(n int64, proto protocol.ID, p peer.ID) {
	if proto == hopID || proto == stopID {
		b.charge(p, n)
	}
}

// The rest of p2pmetrics.Reporter: nothing kept.
func (b *Budgets) LogSentMessage(int64)                         {}
func (b *Budgets) LogRecvMessage(int64)                         {}
func (b *Budgets) GetBandwidthForPeer(peer.ID) p2pmetrics.Stats { return p2pmetrics.Stats{} }
func (b *Budgets) GetBandwidthForProtocol(protocol.ID) p2pmetrics.Stats {
	return p2pmetrics.Stats{}
}
func (b *Budgets) GetBandwidthTotals() p2pmetrics.Stats             { return p2pmetrics.Stats{} }
func (b *Budgets) GetBandwidthByPeer() map[peer.ID]p2pmetrics.Stats { return nil }
func (b *Budgets) GetBandwidthByProtocol() map[protocol.ID]p2pmetrics.Stats {
	return nil
}
func (b *Budgets) Reset()             {}
func (b *Budgets) TrimIdle(time.Time) {}

// resetStreams resets the relay's streams of p — hop streams p opened
// to this relay and stop streams this relay opened to p — which ends every
// circuit p is in. It returns how many it reset.
func resetStreams(h host.Host, p peer.ID) int {
	n := 0
	for _, c := range h.Network().ConnsToPeer(p) {
		for _, s := range c.GetStreams() {
			dir := s.Stat().Direction
			if (s.Protocol() == hopID && dir == network.DirInbound) || (s.Protocol() == stopID && dir == network.DirOutbound) {
				_ = s.Reset()
				n++
			}
		}
	}
	return n
}
