package node

import (
	"github.com/prometheus/client_golang/prometheus"

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
	// it; the partial view's on an ordinary node (view.go).
	announceBytes prometheus.Counter
	viewFetches   *prometheus.CounterVec
	viewBytes     prometheus.Counter
	viewEntries   *prometheus.CounterVec
	viewChecks    *prometheus.CounterVec
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
	m.viewFetches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "overlayd_directory_view_fetches_total",
		Help: "Partial views an ordinary node asked supernodes for, by purpose (refresh: its view; check: a cross-check) and result (ok, error).",
	}, []string{"purpose", "result"})
	m.viewBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "overlayd_directory_view_bytes_total",
		Help: "Bytes of the view responses an ordinary node received.",
	})
	m.viewEntries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "overlayd_directory_view_entries_total",
		Help: "Signed view entries an ordinary node checked, by result: accepted, or the reason it was refused (bad_signature: forged by the server or on the way). Each costs one signature check.",
	}, []string{"result"})
	m.viewChecks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "overlayd_directory_view_checks_total",
		Help: "Cross-checks of an ordinary node's view against other supernodes', by verdict: agree; outvoted (its supernode's view disagreed with the others': the node left that supernode); undecided (views of a changing ring).",
	}, []string{"verdict"})
	for _, v := range []string{"agree", "outvoted", "undecided"} {
		m.viewChecks.WithLabelValues(v)
	}
	m.viewEntries.WithLabelValues("accepted")
	for _, r := range protocol.Reasons {
		m.viewEntries.WithLabelValues(string(r))
	}
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
		m.announceBytes, m.viewFetches, m.viewBytes, m.viewEntries, m.viewChecks,
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
