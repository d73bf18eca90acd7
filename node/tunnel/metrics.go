package tunnel

import "github.com/prometheus/client_golang/prometheus"

// metrics are the tunnels' series, registered on the injected registerer.
type metrics struct {
	opened     *prometheus.CounterVec
	closed     prometheus.Counter
	refused    *prometheus.CounterVec
	failed     prometheus.Counter
	migrations prometheus.Counter
	relayCuts  prometheus.Counter
	idle       prometheus.Counter
	rejected   prometheus.Counter
	bytesIn    prometheus.Counter
	bytesOut   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, m *Manager) (*metrics, error) {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "overlayd_tunnel_" + name, Help: help})
	}
	mt := &metrics{
		opened: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "overlayd_tunnel_connections_opened_total",
			Help: "Tunnel connections opened, by side: expose (served here) or connect (from a local listener)."}, []string{"side"}),
		closed: c("connections_closed_total", "Tunnel connections closed, both sides."),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "overlayd_tunnel_refused_total",
			Help: "Tunnel connections this node refused, by reason: not_allowed (allow-list), busy, no_such_service, unavailable (local service unreachable), no_such_tunnel (resume), resources."}, []string{"reason"}),
		failed:     c("open_failed_total", "Tunnel connections this node could not open to a peer (refused, busy, no path)."),
		migrations: c("migrations_total", "Tunnel connections moved to a new stream (to a direct connection, or after the old stream broke)."),
		relayCuts:  c("relay_cuts_total", "Tunnel connections closed because their relayed circuit ended and no direct connection could be made."),
		idle:       c("idle_closed_total", "Tunnel connections closed by the idle timeout."),
		rejected:   c("rejected_total", "Tunnel frames that broke the protocol (the connection was reset)."),
		bytesIn:    c("bytes_received_total", "Tunnel bytes received from peers and written to local connections."),
		bytesOut:   c("bytes_sent_total", "Tunnel bytes sent to peers."),
	}
	for _, s := range []string{"expose", "connect"} {
		mt.opened.WithLabelValues(s)
	}
	for _, r := range []string{"not_allowed", "busy", "no_such_service", "unavailable", "no_such_tunnel", "resources"} {
		mt.refused.WithLabelValues(r)
	}
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "overlayd_tunnel_connections", Help: "Tunnel connections open, both sides."},
		func() float64 {
			m.mu.Lock()
			defer m.mu.Unlock()
			return float64(m.open)
		})
	if reg == nil {
		return mt, nil
	}
	for _, col := range []prometheus.Collector{mt.opened, mt.closed, mt.refused, mt.failed, mt.migrations, mt.relayCuts, mt.idle, mt.rejected, mt.bytesIn, mt.bytesOut, open} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return mt, nil
}
