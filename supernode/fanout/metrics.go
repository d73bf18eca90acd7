package fanout

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const metricPrefix = "overlayd_supernode_fanout_"

// latencyBuckets span 10 µs to 2.6 s, ×4 per bucket: a small group on an idle
// engine finishes in tens of microseconds, a 30,000-member group in about a
// millisecond, and anything near a second means stalled workers.
var latencyBuckets = prometheus.ExponentialBuckets(10e-6, 4, 10)

// metrics are the engine's Prometheus series. They are created for every
// engine, registered only when a registerer is given, and updated once per
// job (never per member), so the per-member hot path touches no Prometheus
// object.
type metrics struct {
	jobs     prometheus.Counter
	refused  prometheus.Counter
	offered  prometheus.Counter
	dropped  prometheus.Counter
	latency  prometheus.Histogram
	inFlight prometheus.GaugeFunc
}

func newMetrics(inFlight func() float64) *metrics {
	return &metrics{
		jobs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricPrefix + "jobs_total",
			Help: "Group fanout jobs accepted by Fanout.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricPrefix + "jobs_refused_total",
			Help: "Fanout calls refused with ErrBusy because the job queue was full.",
		}),
		offered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricPrefix + "frames_offered_total",
			Help: "Frames offered to member sinks (one per member per job).",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricPrefix + "frames_dropped_total",
			Help: "Offers refused by a member sink because its bounded queue was full or closed.",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    metricPrefix + "latency_seconds",
			Help:    "Time from a Fanout call to the last worker finishing its offers.",
			Buckets: latencyBuckets,
		}),
		inFlight: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: metricPrefix + "jobs_in_flight",
			Help: "Fanout jobs queued or being offered.",
		}, inFlight),
	}
}

// register registers every series on reg; a nil reg registers nothing. It
// stops at the first failure (for example a second engine on the same
// registry) and returns it wrapped.
func (m *metrics) register(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{m.jobs, m.refused, m.offered, m.dropped, m.latency, m.inFlight} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("fanout: register metrics: %w", err)
		}
	}
	return nil
}

// jobDone records one finished job.
func (m *metrics) jobDone(r Result, latency time.Duration) {
	m.offered.Add(float64(r.Delivered + r.Dropped))
	if r.Dropped > 0 {
		m.dropped.Add(float64(r.Dropped))
	}
	m.latency.Observe(latency.Seconds())
}
