package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/node/viewclient"
	"github.com/overlayd/overlayd/protocol"
)

// metrics are the node's own Prometheus series, on the injected registry.
type metrics struct {
	accepted     prometheus.Counter
	rejected     *prometheus.CounterVec
	certRejected *prometheus.CounterVec

	ringRebuilds prometheus.Counter
	ringInfo     *prometheus.GaugeVec

	// --role auto (role_run.go).
	roleChanges *prometheus.CounterVec

	// The directory's two tiers: the topic's bytes on a node that hears
	// it; the partial view's on an ordinary node (node/viewclient), on
	// every node so that all expose the same series.
	announceBytes prometheus.Counter
	view          *viewclient.Metrics
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
	m.ringRebuilds = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "overlayd_ring_rebuilds_total", Help: "Rings built from directory changes (a burst of changes costs one).",
	})
	m.ringInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "overlayd_ring_info", Help: "1 for the live ring's version (a hash of its member set); nodes that agree show the same.",
	}, []string{"version"})
	m.certRejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "overlayd_directory_certificates_rejected_total",
		Help: "Mega-supernode certificates and revocations refused, by reason.",
	}, []string{"reason"})
	for _, r := range protocol.CertReasons {
		m.certRejected.WithLabelValues(string(r))
		m.rejected.WithLabelValues(string(r))
	}
	for _, r := range protocol.Reasons {
		m.rejected.WithLabelValues(string(r))
	}
	m.roleChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "overlayd_node_role_changes_total",
		Help: "Role changes of a --role auto node, by the role taken: supernode (promotion) or ordinary (demotion, counted when its drain begins).",
	}, []string{"to"})
	m.announceBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "overlayd_directory_announcement_bytes_total",
		Help: "Bytes of the directory topic's messages this node validated (each message once; GossipSub's duplicates and control traffic are not counted). 0 on an ordinary node, which keeps a partial view instead.",
	})
	m.roleChanges.WithLabelValues("supernode")
	m.roleChanges.WithLabelValues("ordinary")
	cs := []prometheus.Collector{
		m.roleChanges,
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
			Name: "overlayd_node_mega_cert_not_after_seconds",
			Help: "When this node's mega-supernode certificate expires (Unix seconds); 0 while it holds none. Alert on it before it runs out.",
		}, func() float64 {
			if c, ok := n.MegaCert(); ok {
				return float64(c.NotAfter.Unix())
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "overlayd_node_supernode_cert_not_after_seconds",
			Help: "When this node's supernode certificate (certified networks) expires (Unix seconds); 0 while it holds none.",
		}, func() float64 {
			if c, ok := n.SupernodeCert(); ok {
				return float64(c.NotAfter.Unix())
			}
			return 0
		}),
		m.accepted, m.rejected, m.certRejected, m.ringRebuilds, m.ringInfo,
		m.announceBytes,
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
	if m.view, err = viewclient.NewMetrics(reg); err != nil {
		return nil, err
	}
	return m, nil
}
