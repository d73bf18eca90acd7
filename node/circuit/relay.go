package circuit

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	pbv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/pb"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/supernode/capacity"
)

// Kinds of relay refusal, the values of overlayd_relay_refused_total{kind}.
const (
	// RefusedReservation: go-libp2p's reservation limits (total, per IP,
	// per ASN) refused a reservation.
	RefusedReservation = "reservation"
	// RefusedCircuit: a circuit was refused for resources: the total bound,
	// the per-peer bound or the resource manager.
	RefusedCircuit = "circuit"
	// RefusedNotAttached: a peer that is not attached here asked for a
	// reservation.
	RefusedNotAttached = "not_attached"
	// RefusedBudget: a circuit from or to a peer over its relay budget
	// (budget.go).
	RefusedBudget = "budget"
)

// Config is what a Relay needs of the node.
type Config struct {
	// Host is the node's host; Budgets must be its bandwidth reporter.
	Host     host.Host
	Budgets  *Budgets
	Settings Settings
	// Registry receives the relay's metrics, both sides.
	Registry prometheus.Registerer
	// Reachability is the node's public reachability now: a public node
	// holds no reservation.
	Reachability func() network.Reachability
	// Now is the node's clock; Seed seeds the reservation retries' jitter.
	Now  func() time.Time
	Seed uint64
	Log  *slog.Logger
}

// Relay is the node's circuit relay, on either side: the relay service
// while the node is a supernode, and the reservation client.
type Relay struct {
	cfg    Config
	m      *metrics
	client *reserver

	mu     sync.Mutex
	svc    *relay.Relay
	tracer *tracer
	limits Limits
	since  time.Time
}

// New registers the relay's metrics; nothing runs until StartService or
// RunReservations.
func New(cfg Config) (*Relay, error) {
	if cfg.Host == nil || cfg.Budgets == nil || cfg.Registry == nil || cfg.Reachability == nil || cfg.Now == nil || cfg.Log == nil {
		return nil, errors.New("circuit: Config needs Host, Budgets, Registry, Reachability, Now and Log")
	}
	r := &Relay{cfg: cfg}
	r.client = newReserver(r)
	m, err := newMetrics(cfg.Registry, r)
	if err != nil {
		return nil, fmt.Errorf("relay metrics: %w", err)
	}
	r.m = m
	return r, nil
}

// StartService starts the circuit relay v2 service, sized by the
// attached-peers capacity; only peers for which attached holds may
// reserve. It reports whether it started it (false: it was running).
func (r *Relay) StartService(capacity int, attached func(peer.ID) bool) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.svc != nil {
		return false, nil
	}
	l := LimitsFor(r.cfg.Settings, capacity)
	tr := &tracer{m: r.m}
	h, b := r.cfg.Host, r.cfg.Budgets
	b.start(r.cfg.Settings, r.cfg.Now, r.m, func(p peer.ID) {
		k := resetStreams(h, p)
		r.m.budgetResets.Add(float64(k))
		r.cfg.Log.Warn("relay budget exhausted: circuits cut", "remote", p.ShortString(), "streams", k)
	})
	a := &acl{attached: attached, tracer: tr, maxCircuits: int64(l.Circuits), budget: b}
	svc, err := relay.New(h,
		relay.WithResources(resources(r.cfg.Settings, l)),
		relay.WithACL(a),
		relay.WithMetricsTracer(tr))
	if err != nil {
		b.stop()
		return false, fmt.Errorf("relay service: %w", err)
	}
	r.svc, r.tracer, r.limits, r.since = svc, tr, l, r.cfg.Now()
	pb, pr := r.cfg.Settings.PeerBudgets()
	r.cfg.Log.Info("relay service started", "reservations", l.Reservations, "circuits", l.Circuits, "per_ip", l.PerIP,
		"peer_bytes_per_hour", pb, "peer_rate", pr)
	return true, nil
}

// StopService stops the relay service, if running: circuits in progress
// are cut and reservations dropped (their clients re-reserve on the
// supernode they attach to next). It reports whether it was running.
func (r *Relay) StopService() bool {
	r.mu.Lock()
	svc := r.svc
	r.svc, r.tracer = nil, nil
	r.mu.Unlock()
	if svc == nil {
		return false
	}
	r.cfg.Budgets.stop()
	_ = svc.Close()
	r.cfg.Log.Info("relay service stopped")
	return true
}

// Status is the relay part of the node's status: the service on a
// supernode, the reservation on a client.
func (r *Relay) Status() *localapi.Relay {
	out := &localapi.Relay{Reachability: r.cfg.Reachability().String()}
	r.mu.Lock()
	if r.svc != nil {
		out.Service = &localapi.RelayService{
			Reservations:    int(r.tracer.reservations.Load()),
			Circuits:        int(r.tracer.circuits.Load()),
			MaxReservations: r.limits.Reservations,
			MaxCircuits:     r.limits.Circuits,
			PerIP:           r.limits.PerIP,
		}
	}
	running := r.svc != nil
	r.mu.Unlock()
	if running {
		out.Refused = map[string]uint64{}
		for _, k := range refusalKinds {
			out.Refused[k] = r.m.refusedCount(k)
		}
	}
	if rsv, ok := r.client.current(); ok {
		out.Reservation = &localapi.RelayReservation{Relay: rsv.Relay.String(), Expires: rsv.Expires, Since: rsv.Since}
		for _, a := range rsv.Addrs {
			out.Reservation.Addrs = append(out.Reservation.Addrs, a.String())
		}
	}
	return out
}

// Refused returns the refusals of kind (Refused*) so far.
func (r *Relay) Refused(kind string) uint64 { return r.m.refusedCount(kind) }

// Through returns the relayed addresses of a peer through relay:
// <relay addr>/p2p/<relay>/p2p-circuit, and the bare
// /p2p/<relay>/p2p-circuit when relay's addresses are unknown.
func Through(relay peer.AddrInfo) []ma.Multiaddr {
	tail, err := ma.NewMultiaddr("/p2p/" + relay.ID.String() + "/p2p-circuit")
	if err != nil {
		return nil
	}
	var out []ma.Multiaddr
	for _, a := range relay.Addrs {
		if len(a) > 0 {
			out = append(out, a.Encapsulate(tail))
		}
	}
	if len(out) == 0 {
		out = append(out, tail)
	}
	return out
}

// acl admits reservations from attached clients only, bounds the
// circuits in progress and refuses circuits from or to a peer over its
// relay budget.
type acl struct {
	attached    func(peer.ID) bool
	tracer      *tracer
	maxCircuits int64
	budget      *Budgets
}

var _ relay.ACLFilter = (*acl)(nil)

func (a *acl) AllowReserve(p peer.ID, _ ma.Multiaddr) bool {
	if a.attached(p) {
		return true
	}
	a.tracer.m.refuse(RefusedNotAttached)
	return false
}

func (a *acl) AllowConnect(src peer.ID, _ ma.Multiaddr, dst peer.ID) bool {
	if a.tracer.circuits.Load() >= a.maxCircuits {
		a.tracer.m.refuse(RefusedCircuit)
		return false
	}
	if a.budget != nil && (a.budget.over(src) != "" || a.budget.over(dst) != "") {
		a.tracer.m.refuse(RefusedBudget)
		return false
	}
	return true
}

// tracer follows one relay instance: reservations and circuits held,
// refusals for resources, bytes relayed. go-libp2p's own tracer writes to
// process-global metrics; this one writes to the node's registry.
type tracer struct {
	m            *metrics
	reservations atomic.Int64
	circuits     atomic.Int64
}

var _ relay.MetricsTracer = (*tracer)(nil)

func (t *tracer) RelayStatus(bool)               {}
func (t *tracer) ConnectionOpened()              { t.circuits.Add(1); t.m.circuits.Inc() }
func (t *tracer) ConnectionClosed(time.Duration) { t.circuits.Add(-1) }
func (t *tracer) ConnectionRequestHandled(st pbv2.Status) {
	if st == pbv2.Status_RESOURCE_LIMIT_EXCEEDED {
		t.m.refuse(RefusedCircuit)
	}
}
func (t *tracer) ReservationAllowed(renewal bool) {
	if !renewal {
		t.reservations.Add(1)
	}
	t.m.reservations.Inc()
}
func (t *tracer) ReservationClosed(cnt int) { t.reservations.Add(-int64(cnt)) }
func (t *tracer) ReservationRequestHandled(st pbv2.Status) {
	if st == pbv2.Status_RESERVATION_REFUSED || st == pbv2.Status_RESOURCE_LIMIT_EXCEEDED {
		t.m.refuse(RefusedReservation)
	}
}
func (t *tracer) BytesTransferred(cnt int) { t.m.bytes.Add(float64(cnt)) }

// metrics are the relay's series on the node's registry, both sides.
type metrics struct {
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

var refusalKinds = [4]string{RefusedReservation, RefusedCircuit, RefusedNotAttached, RefusedBudget}

// refuse counts one refusal of kind.
func (m *metrics) refuse(kind string) {
	for i, k := range refusalKinds {
		if k == kind {
			m.refusedN[i].Add(1)
		}
	}
	m.refused.WithLabelValues(kind).Inc()
}

// refusedCount returns the refusals of kind so far.
func (m *metrics) refusedCount(kind string) uint64 {
	for i, k := range refusalKinds {
		if k == kind {
			return m.refusedN[i].Load()
		}
	}
	return 0
}

func newMetrics(reg prometheus.Registerer, rs *Relay) (*metrics, error) {
	m := &metrics{
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
	gauge := func(name, help string, f func(*tracer) int64) prometheus.Collector {
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
		gauge("overlayd_relay_reservations", "Relay reservations held on this supernode.", func(t *tracer) int64 { return t.reservations.Load() }),
		gauge("overlayd_relay_circuits", "Relayed connections in progress through this supernode.", func(t *tracer) int64 { return t.circuits.Load() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "overlayd_client_relay_reserved", Help: "1 while this node holds a relay reservation.",
		}, func() float64 {
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
			return m.refusedCount(RefusedReservation) + m.refusedCount(RefusedNotAttached)
		},
		"relay_circuit": func() uint64 { return m.refusedCount(RefusedCircuit) + m.refusedCount(RefusedBudget) },
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
