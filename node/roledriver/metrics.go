package roledriver

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the driver's series. Every node registers them, so that all
// expose the same series whatever their role.
type Metrics struct {
	changes *prometheus.CounterVec
}

// NewMetrics registers the driver's series on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{changes: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "overlayd_node_role_changes_total",
		Help: "Role changes of a --role auto node, by the role taken: supernode (promotion) or ordinary (demotion, counted when its drain begins).",
	}, []string{"to"})}
	m.changes.WithLabelValues("supernode")
	m.changes.WithLabelValues("ordinary")
	if err := reg.Register(m.changes); err != nil {
		return nil, err
	}
	return m, nil
}
