package capacity

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

const metricPrefix = "overlayd_supernode_semaphore_"

// descs holds one semaphore's metric descriptors. The semaphore name is a
// constant label, so each semaphore is a self-contained collector and two
// semaphores with the same name on one registry are rejected by the
// registry.
type descs struct {
	inUse, max, acquired, refused, unheld *prometheus.Desc
}

func newDescs(name string) descs {
	l := prometheus.Labels{"semaphore": name}
	return descs{
		inUse:    prometheus.NewDesc(metricPrefix+"in_use", "Slots of the semaphore currently held.", nil, l),
		max:      prometheus.NewDesc(metricPrefix+"max", "Current maximum number of slots of the semaphore.", nil, l),
		acquired: prometheus.NewDesc(metricPrefix+"acquired_total", "Successful acquisitions of the semaphore.", nil, l),
		refused:  prometheus.NewDesc(metricPrefix+"refused_total", "Acquisitions refused because the semaphore was at capacity (BUSY).", nil, l),
		unheld:   prometheus.NewDesc(metricPrefix+"unheld_releases_total", "Releases of a slot that was not held (caller bugs).", nil, l),
	}
}

// Describe implements prometheus.Collector.
func (s *Semaphore) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.descs.inUse
	ch <- s.descs.max
	ch <- s.descs.acquired
	ch <- s.descs.refused
	ch <- s.descs.unheld
}

// Collect implements prometheus.Collector. It reads the semaphore's atomics;
// it never blocks acquirers.
func (s *Semaphore) Collect(ch chan<- prometheus.Metric) {
	st := s.Stats()
	ch <- prometheus.MustNewConstMetric(s.descs.inUse, prometheus.GaugeValue, float64(st.InUse))
	ch <- prometheus.MustNewConstMetric(s.descs.max, prometheus.GaugeValue, float64(st.Max))
	ch <- prometheus.MustNewConstMetric(s.descs.acquired, prometheus.CounterValue, float64(st.Acquired))
	ch <- prometheus.MustNewConstMetric(s.descs.refused, prometheus.CounterValue, float64(st.Refused))
	ch <- prometheus.MustNewConstMetric(s.descs.unheld, prometheus.CounterValue, float64(st.UnheldReleases))
}

// Register registers each semaphore as a collector on reg. It stops at the
// first failure, for example a second semaphore with the same name, and
// returns it wrapped; semaphores registered before the failure stay
// registered. A nil reg registers nothing.
func Register(reg prometheus.Registerer, sems ...*Semaphore) error {
	if reg == nil {
		return nil
	}
	for _, s := range sems {
		if s == nil {
			return fmt.Errorf("capacity: register: nil semaphore")
		}
		if err := reg.Register(s); err != nil {
			return fmt.Errorf("capacity: register semaphore %q: %w", s.name, err)
		}
	}
	return nil
}

// refusalCollector exports refusals made outside a Semaphore (by a limit
// that another library enforces, such as go-libp2p's circuit relay) as
// the semaphore family's refused_total series, so that a dashboard summing
// refusals over semaphores counts them as admission refusals too.
type refusalCollector struct {
	desc  *prometheus.Desc
	count func() uint64
}

// RefusalCollector returns a collector of one series,
// overlayd_supernode_semaphore_refused_total{semaphore=name}, read from
// count. name must not be a Semaphore's name on the same registry.
func RefusalCollector(name string, count func() uint64) (prometheus.Collector, error) {
	if err := validateName(name); err != nil {
		return nil, err
	}
	if count == nil {
		return nil, fmt.Errorf("capacity: refusal collector %q: nil count", name)
	}
	return &refusalCollector{desc: newDescs(name).refused, count: count}, nil
}

func (r *refusalCollector) Describe(ch chan<- *prometheus.Desc) { ch <- r.desc }

func (r *refusalCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(r.desc, prometheus.CounterValue, float64(r.count()))
}
