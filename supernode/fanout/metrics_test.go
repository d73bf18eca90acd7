package fanout

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// stepClock advances by one millisecond on every reading.
type stepClock struct{ n atomic.Int64 }

func (c *stepClock) now() time.Time {
	return time.Unix(0, c.n.Add(1)*int64(time.Millisecond))
}

func TestMetrics(t *testing.T) {
	checkGoroutines(t)
	reg := prometheus.NewPedanticRegistry()
	clock := &stepClock{}
	e := newEngine(t, 2, WithRegisterer(reg), WithClock(clock.now), WithMaxJobs(1))
	g := e.NewGroup()
	g.Add("a", &atomicCountSink{})
	g.Add("b", &atomicCountSink{})
	g.Add("full", refuseSink{})
	w := newWaiter()
	for range 5 {
		if err := e.Fanout(g, []byte("x"), w.done); err != nil {
			t.Fatal(err)
		}
		w.wait(t, 1) // one job at a time: each reads the clock twice in turn
	}
	if got := w.total(); got != (Result{Delivered: 10, Dropped: 5}) {
		t.Fatalf("results %+v", got)
	}

	for _, tc := range []struct {
		name string
		want float64
	}{
		{"jobs_total", 5},
		{"jobs_refused_total", 0},
		{"frames_offered_total", 15},
		{"frames_dropped_total", 5},
		{"jobs_in_flight", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				if mf.GetName() != metricPrefix+tc.name {
					continue
				}
				m := mf.GetMetric()[0]
				got := m.GetCounter().GetValue() + m.GetGauge().GetValue()
				if got != tc.want {
					t.Fatalf("%s = %v, want %v", mf.GetName(), got, tc.want)
				}
				return
			}
			t.Fatalf("%s not registered", metricPrefix+tc.name)
		})
	}
	h := e.m.latency
	if n := testutil.CollectAndCount(h); n != 1 {
		t.Fatalf("latency histogram series: %d", n)
	}
	want := `
# HELP overlayd_supernode_fanout_latency_seconds Time from a Fanout call to the last worker finishing its offers.
# TYPE overlayd_supernode_fanout_latency_seconds histogram
overlayd_supernode_fanout_latency_seconds_bucket{le="1e-05"} 0
overlayd_supernode_fanout_latency_seconds_bucket{le="4e-05"} 0
overlayd_supernode_fanout_latency_seconds_bucket{le="0.00016"} 0
overlayd_supernode_fanout_latency_seconds_bucket{le="0.00064"} 0
overlayd_supernode_fanout_latency_seconds_bucket{le="0.00256"} 5
overlayd_supernode_fanout_latency_seconds_bucket{le="0.01024"} 5
overlayd_supernode_fanout_latency_seconds_bucket{le="0.04096"} 5
overlayd_supernode_fanout_latency_seconds_bucket{le="0.16384"} 5
overlayd_supernode_fanout_latency_seconds_bucket{le="0.65536"} 5
overlayd_supernode_fanout_latency_seconds_bucket{le="2.62144"} 5
overlayd_supernode_fanout_latency_seconds_bucket{le="+Inf"} 5
overlayd_supernode_fanout_latency_seconds_sum 0.005
overlayd_supernode_fanout_latency_seconds_count 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metricPrefix+"latency_seconds"); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", err, problems)
	}

	// A second engine cannot register on the same registry.
	if _, err := New(1, WithRegisterer(reg)); err == nil {
		t.Fatal("second engine registered on the same registry")
	}
}

func TestMetricsRefused(t *testing.T) {
	checkGoroutines(t)
	reg := prometheus.NewRegistry()
	e := newEngine(t, 1, WithRegisterer(reg), WithMaxJobs(1))
	g := e.NewGroup()
	gate := &gateSink{entered: make(chan struct{}, 1), release: make(chan struct{})}
	g.Add("gate", gate)
	w := newWaiter()
	if err := e.Fanout(g, nil, w.done); err != nil {
		t.Fatal(err)
	}
	<-gate.entered
	if got := testutil.ToFloat64(e.m.inFlight); got != 1 {
		t.Fatalf("in flight %v, want 1", got)
	}
	for range 4 {
		_ = e.Fanout(g, nil, w.done)
	}
	close(gate.release)
	w.wait(t, 1)
	if got := testutil.ToFloat64(e.m.refused); got != 4 {
		t.Fatalf("refused %v, want 4", got)
	}
	if got := testutil.ToFloat64(e.m.jobs); got != 1 {
		t.Fatalf("jobs %v, want 1", got)
	}
}
