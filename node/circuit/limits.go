package circuit

import (
	"time"

	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"

	"github.com/overlayd/overlayd/supernode/capacity"
)

// Relay settings.
const (
	// circuitsPerPeer bounds the relayed connections to or from one peer
	// at a time (go-libp2p's default). A circuit lives at most
	// circuitDuration and carries at most circuitData per direction: long
	// enough to exchange addresses, upgrade to a direct connection (DCUtR)
	// or ping; overlay messages travel on the attach session, not on
	// circuits.
	circuitsPerPeer = 16
	circuitDuration = 2 * time.Minute
	circuitData     = 128 << 10
	// reservationTTL is how long a reservation lasts unless renewed;
	// clients renew at half of what is left. A reservation also ends when
	// its client disconnects from the relay.
	reservationTTL = 15 * time.Minute
	// bufferSize is the relay's copy buffer per direction of a circuit
	// (go-libp2p's default).
	bufferSize = 2048
	// handshakeMemory is what the relay reserves per hop or stop stream
	// while it reads a message.
	handshakeMemory = 4096
)

// Settings are the operator's relay settings (the daemon's --relay-* flags
// and --conns-per-ip).
type Settings struct {
	// CircuitData is the data limit of one circuit per direction (0: the
	// default, 128 KiB); CircuitDuration its lifetime (0: 2 min).
	CircuitData     int64
	CircuitDuration time.Duration
	// PeerBytes is the bytes relayed for one peer per hour, PeerRate its
	// bytes per second: 0 for the default (in proportion to CircuitData),
	// -1 for unlimited.
	PeerBytes, PeerRate int64
	// ConnsPerIP bounds the reservations per IP address.
	ConnsPerIP int
}

// CircuitDataLimit is the per-circuit data limit (per direction) of s.
func (s Settings) CircuitDataLimit() int64 {
	if s.CircuitData > 0 {
		return s.CircuitData
	}
	return circuitData
}

// Limits are the bounds a supernode gives its relay.
type Limits struct {
	Reservations int // = attached-peers capacity
	Circuits     int // total, = relays semaphore size
	PerIP        int // reservations per IPv4 address (IPv6 /64 in go-libp2p's accounting)
}

// LimitsFor returns the limits of a supernode of attached-peers capacity
// attached.
func LimitsFor(s Settings, attached int) Limits {
	d := capacity.DefaultLimits(attached)
	return Limits{Reservations: d.AttachedPeers, Circuits: d.RelaysInFlight, PerIP: min(s.ConnsPerIP, d.AttachedPeers)}
}

// resources are go-libp2p's relay resources for l.
func resources(s Settings, l Limits) relay.Resources {
	r := relay.DefaultResources()
	r.Limit = &relay.RelayLimit{Duration: circuitDuration, Data: circuitData}
	if s.CircuitData > 0 {
		r.Limit.Data = s.CircuitData
	}
	if s.CircuitDuration > 0 {
		r.Limit.Duration = s.CircuitDuration
	}
	r.ReservationTTL = reservationTTL
	r.MaxReservations = l.Reservations
	r.MaxCircuits = circuitsPerPeer
	r.BufferSize = bufferSize
	r.MaxReservationsPerIP = l.PerIP
	r.MaxReservationsPerASN = 8 * s.ConnsPerIP
	return r
}

// ResourceLimits are the resource-manager limits of the relay service (svc)
// and of its hop and stop protocols (proto) on a host of attached-peers
// capacity attached, sized so that the relay's own bounds (LimitsFor)
// decide and the resource manager is only the outer wall: one inbound hop
// stream per circuit and per reservation handshake, one outbound stop
// stream per circuit, and per circuit two copy buffers and the handshake
// memory of both streams. Every role gets them: an auto node may become a
// supernode without a restart.
func ResourceLimits(s Settings, attached int) (svc, proto rcmgr.ResourceLimits) {
	l := LimitsFor(s, max(attached, 1))
	in := l.Circuits + l.Reservations
	out := l.Circuits
	mem := int64(l.Circuits)*(2*bufferSize+2*handshakeMemory) + int64(l.Reservations)*handshakeMemory + 4<<20
	svc = rcmgr.ResourceLimits{
		StreamsInbound:  rcmgr.LimitVal(in),
		StreamsOutbound: rcmgr.LimitVal(out + circuitsPerPeer),
		Streams:         rcmgr.LimitVal(in + out + circuitsPerPeer),
		Memory:          rcmgr.LimitVal64(mem),
	}
	// The protocols count the client side too: a node behind NAT accepts
	// stop streams (its inbound circuits) and opens hop streams
	// (reservations, circuits to others).
	proto = rcmgr.ResourceLimits{
		StreamsInbound:  rcmgr.LimitVal(in + circuitsPerPeer),
		StreamsOutbound: rcmgr.LimitVal(out + circuitsPerPeer),
		Streams:         rcmgr.LimitVal(in + out + 2*circuitsPerPeer),
	}
	return svc, proto
}
