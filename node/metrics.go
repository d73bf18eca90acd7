package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/node/dirdriver"
	"github.com/overlayd/overlayd/node/roledriver"
	"github.com/overlayd/overlayd/node/trust"
	"github.com/overlayd/overlayd/node/viewclient"
)

// metrics are the node's Prometheus series on the injected registry: its
// own gauges and its parts', registered on every node whatever its role.
type metrics struct {
	// Certificates (node/trust).
	trust *trust.Metrics

	// --role auto (node/roledriver).
	roles *roledriver.Metrics

	// The directory's two tiers: the topic's announcements and the ring
	// (node/dirdriver) on a node that hears it; the partial view's on an
	// ordinary node (node/viewclient). Both on every node, so that all
	// expose the same series.
	dir  *dirdriver.Metrics
	view *viewclient.Metrics
}

func newMetrics(reg prometheus.Registerer, n *Node) (*metrics, error) {
	m := &metrics{}
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "overlayd_node_serving",
			Help: "1 while the node plays the supernode role (always for --role supernode; between promotion and demotion for --role auto).",
		}, func() float64 {
			if n.serving.Load() {
				return 1
			}
			return 0
		}),
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
	var err error
	if m.trust, err = trust.NewMetrics(reg, n.MegaCert, n.SupernodeCert); err != nil {
		return nil, err
	}
	if m.roles, err = roledriver.NewMetrics(reg); err != nil {
		return nil, err
	}
	if m.dir, err = dirdriver.NewMetrics(reg); err != nil {
		return nil, err
	}
	if m.view, err = viewclient.NewMetrics(reg); err != nil {
		return nil, err
	}
	return m, nil
}
