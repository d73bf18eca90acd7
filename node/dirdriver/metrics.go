package dirdriver

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/protocol"
)

// Metrics are the driver's Prometheus series. Their names are the ones
// they had in node: the directory topic's (overlayd_directory_announcement*)
// and the ring's (overlayd_ring_*).
type Metrics struct {
	accepted      prometheus.Counter
	rejected      *prometheus.CounterVec
	announceBytes prometheus.Counter
	ringRebuilds  prometheus.Counter
	ringInfo      *prometheus.GaugeVec
}

// NewMetrics registers the driver's series on reg. A node registers them
// whether or not it hears the topic (the announcement series stay 0 on a
// node that keeps a partial view), so that every node exposes the same
// series.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("dirdriver: NewMetrics needs a registerer")
	}
	m := &Metrics{
		accepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overlayd_directory_announcements_accepted_total",
			Help: "Supernode announcements accepted into the directory.",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overlayd_directory_announcements_rejected_total",
			Help: "Supernode announcements refused, by reason.",
		}, []string{"reason"}),
		announceBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overlayd_directory_announcement_bytes_total",
			Help: "Bytes of the directory topic's messages this node validated (each message once; GossipSub's duplicates and control traffic are not counted). 0 on an ordinary node, which keeps a partial view instead.",
		}),
		ringRebuilds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overlayd_ring_rebuilds_total", Help: "Rings built from directory changes (a burst of changes costs one).",
		}),
		ringInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "overlayd_ring_info", Help: "1 for the live ring's version (a hash of its member set); nodes that agree show the same.",
		}, []string{"version"}),
	}
	// An announcement is refused for a reason of the wire contract or of
	// its certificate: every reason is exported from the start.
	for _, r := range protocol.CertReasons {
		m.rejected.WithLabelValues(string(r))
	}
	for _, r := range protocol.Reasons {
		m.rejected.WithLabelValues(string(r))
	}
	for _, c := range []prometheus.Collector{m.accepted, m.rejected, m.ringRebuilds, m.ringInfo, m.announceBytes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
