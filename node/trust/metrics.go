package trust

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/protocol"
)

// Metrics are the certificate series of a node: what it refused and when
// its own certificates expire. Every node registers them, so that all
// expose the same series whatever their role.
type Metrics struct {
	rejected *prometheus.CounterVec
}

// NewMetrics registers the series on reg. mega and supernode report this
// node's own certificates (the node's MegaCert and SupernodeCert, which
// answer none before the Keeper exists).
func NewMetrics(reg prometheus.Registerer, mega func() (protocol.MegaCert, bool), supernode func() (protocol.SupernodeCert, bool)) (*Metrics, error) {
	m := &Metrics{rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "overlayd_directory_certificates_rejected_total",
		Help: "Mega-supernode certificates and revocations refused, by reason.",
	}, []string{"reason"})}
	for _, r := range protocol.CertReasons {
		m.rejected.WithLabelValues(string(r))
	}
	for _, c := range []prometheus.Collector{
		m.rejected,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "overlayd_node_mega_cert_not_after_seconds",
			Help: "When this node's mega-supernode certificate expires (Unix seconds); 0 while it holds none. Alert on it before it runs out.",
		}, func() float64 {
			if c, ok := mega(); ok {
				return float64(c.NotAfter.Unix())
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "overlayd_node_supernode_cert_not_after_seconds",
			Help: "When this node's supernode certificate (certified networks) expires (Unix seconds); 0 while it holds none.",
		}, func() float64 {
			if c, ok := supernode(); ok {
				return float64(c.NotAfter.Unix())
			}
			return 0
		}),
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Rejected counts a refused certificate or revocation (Config.Rejected).
func (m *Metrics) Rejected(r protocol.Reason) { m.rejected.WithLabelValues(string(r)).Inc() }
