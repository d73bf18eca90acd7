package viewclient

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/overlay/view"
	"github.com/overlayd/overlayd/protocol"
)

// Metrics are the view client's Prometheus series. Their names are the
// directory's (overlayd_directory_view_*), as they were in node: the
// partial view is the directory's second tier.
type Metrics struct {
	fetches *prometheus.CounterVec
	bytes   prometheus.Counter
	entries *prometheus.CounterVec
	checks  *prometheus.CounterVec
}

// NewMetrics registers the view series on reg. A node registers them
// whether or not it keeps a view (they stay 0 on one that hears the
// topic), so that every node exposes the same series.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("viewclient: NewMetrics needs a registerer")
	}
	m := &Metrics{
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overlayd_directory_view_fetches_total",
			Help: "Partial views an ordinary node asked supernodes for, by purpose (refresh: its view; check: a cross-check) and result (ok, error).",
		}, []string{"purpose", "result"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overlayd_directory_view_bytes_total",
			Help: "Bytes of the view responses an ordinary node received.",
		}),
		entries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overlayd_directory_view_entries_total",
			Help: "Signed view entries an ordinary node checked, by result: accepted, or the reason it was refused (bad_signature: forged by the server or on the way). Each costs one signature check.",
		}, []string{"result"}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overlayd_directory_view_checks_total",
			Help: "Cross-checks of an ordinary node's view against other supernodes', by verdict: agree; outvoted (its supernode's view disagreed with the others': the node left that supernode); undecided (views of a changing ring).",
		}, []string{"verdict"}),
	}
	for _, v := range []view.Verdict{view.Agree, view.Outvoted, view.Undecided} {
		m.checks.WithLabelValues(v.String())
	}
	m.entries.WithLabelValues("accepted")
	for _, r := range protocol.Reasons {
		m.entries.WithLabelValues(string(r))
	}
	for _, c := range []prometheus.Collector{m.fetches, m.bytes, m.entries, m.checks} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
