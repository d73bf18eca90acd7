package node

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	pbv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/pb"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/supernode/capacity"
)

// Circuit relay v2 on supernodes.
//
// A supernode relays connections to the ordinary nodes attached to it that
// are not publicly reachable. The relay's resources follow the admission
// semaphores (see relayResources): only attached clients may reserve, so
// reservations never exceed the attached-peers capacity; circuits in total
// are bounded by the relays semaphore's size (RelaysPerPeer × capacity);
// reservations per IP follow --conns-per-ip. go-libp2p's
// EnableRelayService waits for AutoNAT to call the node public, which never
// happens on private networks and is not the role's decision: the service is
// constructed directly when the node becomes a supernode.

// Relay settings.
const (
	// relayCircuitsPerPeer bounds the relayed connections to or from one
	// peer at a time (go-libp2p's default). A circuit lives at most
	// relayCircuitDuration and carries at most relayCircuitData per
	// direction: long enough to exchange addresses, upgrade to a direct
	// connection (DCUtR) or ping; overlay messages travel on the attach
	// session, not on circuits.
	relayCircuitsPerPeer = 16
	relayCircuitDuration = 2 * time.Minute
	relayCircuitData     = 128 << 10
	// relayReservationTTL is how long a reservation lasts unless renewed;
	// clients renew at half of what is left. A reservation also ends when
	// its client disconnects from the relay.
	relayReservationTTL = 15 * time.Minute
	// relayBufferSize is the relay's copy buffer per direction of a
	// circuit (go-libp2p's default).
	relayBufferSize = 2048
	// relayHandshakeMemory is what the relay reserves per hop or stop
	// stream while it reads a message.
	relayHandshakeMemory = 4096
)

// Kinds of relay refusal, the values of overlayd_relay_refused_total{kind}.
const (
	// refusedReservation: go-libp2p's reservation limits (total, per IP,
	// per ASN) refused a reservation.
	refusedReservation = "reservation"
	// refusedCircuit: a circuit was refused for resources: the total bound,
	// the per-peer bound or the resource manager.
	refusedCircuit = "circuit"
	// refusedNotAttached: a peer that is not attached here asked for a
	// reservation.
	refusedNotAttached = "not_attached"
	// refusedBudget: a circuit from or to a peer over its relay budget
	// (circuit_budget.go).
	refusedBudget = "budget"
)

// relayLimits are the bounds a supernode of capacity c gives its relay.
type relayLimits struct {
	reservations int // = attached-peers capacity
	circuits     int // total, = relays semaphore size
	perIP        int // reservations per IPv4 address (IPv6 /64 in go-libp2p's accounting)
}

func relayLimitsFor(c Config, attached int) relayLimits {
	d := capacity.DefaultLimits(attached)
	return relayLimits{reservations: d.AttachedPeers, circuits: d.RelaysInFlight, perIP: min(c.ConnsPerIP, d.AttachedPeers)}
}

// relayResources are go-libp2p's relay resources for l.
func relayResources(c Config, l relayLimits) relay.Resources {
	r := relay.DefaultResources()
	r.Limit = &relay.RelayLimit{Duration: relayCircuitDuration, Data: relayCircuitData}
	if c.RelayCircuitData > 0 {
		r.Limit.Data = c.RelayCircuitData
	}
	if c.RelayCircuitDuration > 0 {
		r.Limit.Duration = c.RelayCircuitDuration
	}
	r.ReservationTTL = relayReservationTTL
	r.MaxReservations = l.reservations
	r.MaxCircuits = relayCircuitsPerPeer
	r.BufferSize = relayBufferSize
	r.MaxReservationsPerIP = l.perIP
	r.MaxReservationsPerASN = 8 * c.ConnsPerIP
	return r
}

// relayState is the node's reachability and relay state, on either side.
type relayState struct {
	reach  reachValue
	m      *relayMetrics
	client *relayClient
	// budget counts relayed bytes per peer (the host's bandwidth
	// reporter) while the relay service runs.
	budget relayBudgets

	mu     sync.Mutex
	svc    *relay.Relay
	tracer *relayTracer
	limits relayLimits
	since  time.Time
}

func (rs *relayState) init(n *Node) error {
	m, err := newRelayMetrics(n.reg, rs)
	if err != nil {
		return fmt.Errorf("relay metrics: %w", err)
	}
	rs.m = m
	rs.client = newRelayClient(n)
	return nil
}

// startRelay starts the circuit relay v2 service and the locate protocol
// of the supernode role, sized by the current attached-peers capacity. It
// needs the admission (only attached clients may reserve). Calling it while
// the relay runs does nothing.
func (n *Node) startRelay() error {
	rs := &n.relay
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.svc != nil {
		return nil
	}
	if n.admission == nil || n.router == nil || n.host == nil || rs.m == nil {
		return errors.New("relay: start the supernode role (admission) and the node first")
	}
	capacity := n.cfg.Capacity
	if n.sems != nil {
		capacity = n.sems.Attached.Max()
	}
	l := relayLimitsFor(n.cfg, capacity)
	tr := &relayTracer{m: rs.m}
	h := n.host
	rs.budget.start(n.cfg, n.now, rs.m, func(p peer.ID) {
		k := resetRelayStreams(h, p)
		rs.m.budgetResets.Add(float64(k))
		n.log.Warn("relay budget exhausted: circuits cut", "remote", p.ShortString(), "streams", k)
	})
	acl := &relayACL{attached: n.admission.Has, tracer: tr, maxCircuits: int64(l.circuits), budget: &rs.budget}
	svc, err := relay.New(n.host,
		relay.WithResources(relayResources(n.cfg, l)),
		relay.WithACL(acl),
		relay.WithMetricsTracer(tr))
	if err != nil {
		rs.budget.stop()
		return fmt.Errorf("relay service: %w", err)
	}
	rs.svc, rs.tracer, rs.limits, rs.since = svc, tr, l, n.now()
	n.host.SetStreamHandler(protocol.LocateID, n.router.HandleLocate)
	pb, pr := relayPeerBudgets(n.cfg)
	n.log.Info("relay service started", "reservations", l.reservations, "circuits", l.circuits, "per_ip", l.perIP,
		"peer_bytes_per_hour", pb, "peer_rate", pr)
	return nil
}

// stopRelay stops the relay service and the locate protocol, if running:
// circuits in progress are cut and reservations dropped (their clients
// re-reserve on the supernode they attach to next). Idempotent.
func (n *Node) stopRelay() {
	rs := &n.relay
	rs.mu.Lock()
	svc := rs.svc
	rs.svc, rs.tracer = nil, nil
	rs.mu.Unlock()
	if svc == nil {
		return
	}
	rs.budget.stop()
	if n.host != nil {
		n.host.RemoveStreamHandler(protocol.LocateID)
	}
	_ = svc.Close()
	n.log.Info("relay service stopped")
}

// relayStatus is the relay part of the status: the service on a
// supernode, the reservation on a client.
func (n *Node) relayStatus() *localapi.Relay {
	rs := &n.relay
	out := &localapi.Relay{Reachability: n.Reachability().String()}
	rs.mu.Lock()
	if rs.svc != nil {
		out.Service = &localapi.RelayService{
			Reservations:    int(rs.tracer.reservations.Load()),
			Circuits:        int(rs.tracer.circuits.Load()),
			MaxReservations: rs.limits.reservations,
			MaxCircuits:     rs.limits.circuits,
			PerIP:           rs.limits.perIP,
		}
	}
	running := rs.svc != nil
	rs.mu.Unlock()
	if running {
		out.Refused = map[string]uint64{}
		for _, k := range refusalKinds {
			out.Refused[k] = rs.m.refusedCount(k)
		}
	}
	if rs.client != nil {
		if r, ok := rs.client.current(); ok {
			out.Reservation = &localapi.RelayReservation{Relay: r.relay.String(), Expires: r.expires, Since: r.since}
			for _, a := range r.addrs {
				out.Reservation.Addrs = append(out.Reservation.Addrs, a.String())
			}
		}
	}
	return out
}

// relayACL admits reservations from attached clients only, bounds the
// circuits in progress and refuses circuits from or to a peer over its
// relay budget.
type relayACL struct {
	attached    func(peer.ID) bool
	tracer      *relayTracer
	maxCircuits int64
	budget      *relayBudgets
}

var _ relay.ACLFilter = (*relayACL)(nil)

func (a *relayACL) AllowReserve(p peer.ID, _ ma.Multiaddr) bool {
	if a.attached(p) {
		return true
	}
	a.tracer.m.refuse(refusedNotAttached)
	return false
}

func (a *relayACL) AllowConnect(src peer.ID, _ ma.Multiaddr, dst peer.ID) bool {
	if a.tracer.circuits.Load() >= a.maxCircuits {
		a.tracer.m.refuse(refusedCircuit)
		return false
	}
	if a.budget != nil && (a.budget.over(src) != "" || a.budget.over(dst) != "") {
		a.tracer.m.refuse(refusedBudget)
		return false
	}
	return true
}

// relayTracer follows one relay instance: reservations and circuits held,
// refusals for resources, bytes relayed. go-libp2p's own tracer writes to
// process-global metrics; this one writes to the node's registry.
type relayTracer struct {
	m            *relayMetrics
	reservations atomic.Int64
	circuits     atomic.Int64
}

var _ relay.MetricsTracer = (*relayTracer)(nil)

func (t *relayTracer) RelayStatus(bool)               {}
func (t *relayTracer) ConnectionOpened()              { t.circuits.Add(1); t.m.circuits.Inc() }
func (t *relayTracer) ConnectionClosed(time.Duration) { t.circuits.Add(-1) }
func (t *relayTracer) ConnectionRequestHandled(st pbv2.Status) {
	if st == pbv2.Status_RESOURCE_LIMIT_EXCEEDED {
		t.m.refuse(refusedCircuit)
	}
}
func (t *relayTracer) ReservationAllowed(renewal bool) {
	if !renewal {
		t.reservations.Add(1)
	}
	t.m.reservations.Inc()
}
func (t *relayTracer) ReservationClosed(cnt int) { t.reservations.Add(-int64(cnt)) }
func (t *relayTracer) ReservationRequestHandled(st pbv2.Status) {
	if st == pbv2.Status_RESERVATION_REFUSED || st == pbv2.Status_RESOURCE_LIMIT_EXCEEDED {
		t.m.refuse(refusedReservation)
	}
}
func (t *relayTracer) BytesTransferred(cnt int) { t.m.bytes.Add(float64(cnt)) }

// relayMetrics are the relay's series on the node's registry, both sides.
type relayMetrics struct {
	refused      *prometheus.CounterVec
	refusedN     [4]atomic.Uint64 // by refusalKinds index, for the status
	reservations prometheus.Counter
	circuits     prometheus.Counter
	bytes        prometheus.Counter
	// Budgets: peers going over one (by budget), streams reset for it.
	budgetCuts   *prometheus.CounterVec
	budgetResets prometheus.Counter
	// Client side.
	reserveAttempts *prometheus.CounterVec
	reserveTime     prometheus.Histogram
}

var refusalKinds = [4]string{refusedReservation, refusedCircuit, refusedNotAttached, refusedBudget}

// refuse counts one refusal of kind.
func (m *relayMetrics) refuse(kind string) {
	for i, k := range refusalKinds {
		if k == kind {
			m.refusedN[i].Add(1)
		}
	}
	m.refused.WithLabelValues(kind).Inc()
}

// refusedCount returns the refusals of kind so far.
func (m *relayMetrics) refusedCount(kind string) uint64 {
	for i, k := range refusalKinds {
		if k == kind {
			return m.refusedN[i].Load()
		}
	}
	return 0
}

func newRelayMetrics(reg prometheus.Registerer, rs *relayState) (*relayMetrics, error) {
	m := &relayMetrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overlayd_relay_refused_total",
			Help: "Relay requests this supernode refused, by kind: reservation (reservation limits: total, per IP), circuit (circuit limits), not_attached (a reservation from a peer not attached here), budget (a circuit from or to a peer over its relay byte or rate budget). Admission refusals, as BUSY answers are.",
		}, []string{"kind"}),
		reservations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overlayd_relay_reservations_accepted_total", Help: "Relay reservations accepted or renewed.",
		}),
		circuits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overlayd_relay_circuits_opened_total", Help: "Relayed connections opened.",
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overlayd_relay_bytes_total", Help: "Bytes relayed, both directions.",
		}),
		budgetCuts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overlayd_relay_budget_cuts_total",
			Help: "Peers that went over a relay budget (bytes: --relay-peer-bytes per hour; rate: --relay-peer-rate), by budget; their relayed streams are reset and their new circuits refused until the budget refills.",
		}, []string{"budget"}),
		budgetResets: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overlayd_relay_budget_streams_reset_total", Help: "Relay hop and stop streams reset because a peer went over its relay budget.",
		}),
		reserveAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overlayd_client_relay_reservations_total",
			Help: "Relay reservations this node asked its supernode for, by result: ok, refused, error.",
		}, []string{"result"}),
		reserveTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "overlayd_client_relay_reserve_seconds",
			Help:    "Time to obtain a relay reservation.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
	for _, k := range refusalKinds {
		m.refused.WithLabelValues(k)
	}
	for _, k := range []string{budgetBytes, budgetRate} {
		m.budgetCuts.WithLabelValues(k)
	}
	for _, r := range []string{"ok", "refused", "error"} {
		m.reserveAttempts.WithLabelValues(r)
	}
	gauge := func(name, help string, f func(*relayTracer) int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			rs.mu.Lock()
			defer rs.mu.Unlock()
			if rs.tracer == nil {
				return 0
			}
			return float64(f(rs.tracer))
		})
	}
	cs := []prometheus.Collector{m.refused, m.reservations, m.circuits, m.bytes, m.budgetCuts, m.budgetResets, m.reserveAttempts, m.reserveTime,
		gauge("overlayd_relay_reservations", "Relay reservations held on this supernode.", func(t *relayTracer) int64 { return t.reservations.Load() }),
		gauge("overlayd_relay_circuits", "Relayed connections in progress through this supernode.", func(t *relayTracer) int64 { return t.circuits.Load() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "overlayd_client_relay_reserved", Help: "1 while this node holds a relay reservation.",
		}, func() float64 {
			if rs.client == nil {
				return 0
			}
			if _, ok := rs.client.current(); ok {
				return 1
			}
			return 0
		}),
	}
	// Relay refusals are admission refusals: they also appear in the
	// semaphores' refused_total family, as relay_reservation and
	// relay_circuit (a reservation from a stranger counts with the
	// reservations).
	for name, count := range map[string]func() uint64{
		"relay_reservation": func() uint64 {
			return m.refusedCount(refusedReservation) + m.refusedCount(refusedNotAttached)
		},
		"relay_circuit": func() uint64 { return m.refusedCount(refusedCircuit) + m.refusedCount(refusedBudget) },
	} {
		c, err := capacity.RefusalCollector(name, count)
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
