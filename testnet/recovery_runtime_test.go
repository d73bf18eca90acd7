package testnet

import (
	"math"
	"runtime"
	"runtime/metrics"
	"syscall"
	"time"
)

// recRuntime is what the test process itself did over a phase: the whole
// network runs in it, so a starved or stalled process shows up as late
// keepalives and slow sample scans. It tells the harness's limits apart
// from the overlay's.
type recRuntime struct {
	Seconds float64 `json:"seconds"`
	// CPUCores is the process's CPU time over the wall time.
	CPUCores float64 `json:"cpu_cores"`
	// SchedP99Ms and SchedMaxMs are the goroutine scheduling latencies
	// (time runnable before running), as bucket upper bounds.
	SchedP99Ms float64 `json:"sched_latency_p99_ms"`
	SchedMaxMs float64 `json:"sched_latency_max_ms"`
	GCCycles   uint64  `json:"gc_cycles"`
	// GCPauseMaxMs is the longest stop-the-world pause for GC.
	GCPauseMaxMs float64 `json:"gc_pause_max_ms"`
	Goroutines   int     `json:"goroutines_end"`
	LoadAvg      string  `json:"loadavg_end"`
}

// recMark is a reading of the process's counters.
type recMark struct {
	at       time.Time
	cpu      time.Duration
	sched    *metrics.Float64Histogram
	pauses   *metrics.Float64Histogram
	gcCycles uint64
}

func recMarkNow() recMark {
	ss := []metrics.Sample{{Name: "/sched/latencies:seconds"}, {Name: "/sched/pauses/total/gc:seconds"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(ss)
	m := recMark{at: time.Now()}
	if ss[0].Value.Kind() == metrics.KindFloat64Histogram {
		m.sched = ss[0].Value.Float64Histogram()
	}
	if ss[1].Value.Kind() == metrics.KindFloat64Histogram {
		m.pauses = ss[1].Value.Float64Histogram()
	}
	if ss[2].Value.Kind() == metrics.KindUint64 {
		m.gcCycles = ss[2].Value.Uint64()
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		m.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return m
}

// recRuntimeBetween returns the process's figures from a to b.
func recRuntimeBetween(a, b recMark) recRuntime {
	wall := b.at.Sub(a.at).Seconds()
	r := recRuntime{Seconds: wall, GCCycles: b.gcCycles - a.gcCycles, Goroutines: runtime.NumGoroutine(), LoadAvg: recLoadAvg()}
	if wall > 0 {
		r.CPUCores = (b.cpu - a.cpu).Seconds() / wall
	}
	r.SchedP99Ms = 1000 * recHistQuantile(a.sched, b.sched, 0.99)
	r.SchedMaxMs = 1000 * recHistQuantile(a.sched, b.sched, 1)
	r.GCPauseMaxMs = 1000 * recHistQuantile(a.pauses, b.pauses, 1)
	return r
}

// recHistQuantile returns the q-quantile of the observations between two
// readings of a histogram, as the upper bound of its bucket (the lower
// bound for the open top bucket), or 0 without observations.
func recHistQuantile(a, b *metrics.Float64Histogram, q float64) float64 {
	if a == nil || b == nil || len(a.Counts) != len(b.Counts) {
		return 0
	}
	var total uint64
	for i := range b.Counts {
		total += b.Counts[i] - a.Counts[i]
	}
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	var cum uint64
	for i := range b.Counts {
		if cum += b.Counts[i] - a.Counts[i]; cum >= max(rank, 1) {
			if hi := b.Buckets[i+1]; !math.IsInf(hi, 1) {
				return hi
			}
			return b.Buckets[i]
		}
	}
	return 0
}
