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
