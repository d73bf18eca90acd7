package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/protocol"
)

// metrics are the node's own Prometheus series, on the injected registry.
type metrics struct {
	accepted prometheus.Counter
	rejected *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, n *Node) (*metrics, error) {
	m := &metrics{
		accepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overlayd_directory_announcements_accepted_total",
			Help: "Supernode announcements accepted into the directory.",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overlayd_directory_announcements_rejected_total",
			Help: "Supernode announcements refused, by reason.",
		}, []string{"reason"}),
	}
	for _, r := range protocol.Reasons {
		m.rejected.WithLabelValues(string(r))
	}
	cs := []prometheus.Collector{
		m.accepted, m.rejected,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "overlayd_directory_entries",
			Help: "Live supernodes in this node's directory.",
		}, func() float64 { return float64(n.dir.Snapshot().Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "overlayd_node_connections",
			Help: "Open libp2p connections.",
		}, func() float64 {
			if h := n.host; h != nil {
				return float64(len(h.Network().Conns()))
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "overlayd_node_connected_peers",
			Help: "Peers with at least one open connection.",
		}, func() float64 {
			if h := n.host; h != nil {
				return float64(len(h.Network().Peers()))
			}
			return 0
		}),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
