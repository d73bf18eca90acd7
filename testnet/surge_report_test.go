package testnet

import (
	"maps"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// surgeReport is one scenario's outcome; it is written as JSON.
type surgeReport struct {
	Policy string     `json:"policy"`
	Scale  surgeScale `json:"scale"`
	// EarlyClients fill the supernode before the surge: EarlyHelper
	// nodes in one early-client process (startEarly) plus Probes overlayd
	// processes (see ProbeKeepalive). Neither runs in the process of the
	// surge clients.
	EarlyClients int    `json:"early_clients"`
	EarlyHelper  int    `json:"early_in_helper_process"`
	Probes       int    `json:"probe_processes"`
	SurgeClients int    `json:"surge_clients"`
	Seed         uint64 `json:"seed"`
	// SurgeSeconds is the recorded surge window; StartSeconds how long
	// starting every surge client took (they start concurrently inside
	// the window).
	SurgeSeconds float64 `json:"surge_seconds"`
	StartSeconds float64 `json:"surge_start_seconds"`

	// Attempts by result, made by any client inside the surge window.
	Attempts  int `json:"attempts"`
	Busy      int `json:"busy"`
	Accepted  int `json:"accepted"`
	Redirects int `json:"redirects"`
	// SurgeAccepted are the ACCEPTs surge clients got; SessionEnds the
	// sessions that ended (session_end events of the surge and early clients, and the
	// probes' failovers) from the start: with the supernode at capacity,
	// every surge ACCEPT needs a slot one of them freed.
	SurgeAccepted int `json:"surge_accepted"`
	SessionEnds   int `json:"session_ends"`
	// Errors are attempts that got no answer (should be 0).
	Errors int `json:"errors"`
	// BusyServer is the supernode's own count of refusals in the window
	// (overlayd_supernode_semaphore_refused_total delta), a cross-check.
	BusyServer    int     `json:"busy_server"`
	BusyPerSec    float64 `json:"busy_per_s"`
	BusyLatencyMs dist    `json:"busy_latency_ms"`

	// Attempts per 100 ms window from the start of the surge, by the time
	// the answer (or error) arrived. Peak and the mean over windows with
	// at least one attempt; the retry-only figures leave out each
	// client's first attempt, which no retry policy governs.
	PerWindow         []int   `json:"attempts_per_100ms"`
	Peak100ms         int     `json:"peak_100ms"`
	MeanOccupied      float64 `json:"mean_per_occupied_100ms"`
	PeakRetry100ms    int     `json:"peak_retry_100ms"`
	MeanRetryOccupied float64 `json:"mean_retry_per_occupied_100ms"`
	FirstWaveSpanMs   float64 `json:"first_attempts_span_ms"`
	// The same over the steady part of the surge (see SteadyFromSeconds):
	// windows that start after every surge client's first attempt.
	PeakSteady100ms int     `json:"peak_steady_100ms"`
	MeanSteady100ms float64 `json:"mean_steady_100ms"`

	// The early-client process's keepalive round trips before and during
	// the surge (from its nodes' observer events, exact).
	KeepaliveBeforeMs dist    `json:"keepalive_before_ms"`
	KeepaliveDuringMs dist    `json:"keepalive_during_ms"`
	KeepaliveP99Ratio float64 `json:"keepalive_p99_ratio"`
	// ProbeKeepalive is the same for the early clients that run as their
	// own processes, outside the surge clients' process: p99 is the upper
	// bound of the overlayd_client_keepalive_rtt_seconds bucket holding it
	// (buckets double from 0.1 ms), so it is exact to a factor of 2.
	ProbeKeepalive probeFigures `json:"probe_keepalive"`
	// EarlyLost counts early clients that lost or changed their
	// attachment, or failed over, during the surge (should be 0).
	EarlyLost       int `json:"early_lost"`
	EarlyLostProbes int `json:"early_lost_probes"`
	// EarlySessionEnds are the reasons the early-client process's
	// sessions ended, if any did.
	EarlySessionEnds []string `json:"early_session_ends,omitempty"`

	// Supernode process figures. Before and after are read after two
	// forced GCs; during is the largest value sampled every 200 ms (no
	// forced GC, so it includes garbage).
	HeapBytes           triple  `json:"heap_alloc_bytes"`
	Goroutines          triple  `json:"goroutines"`
	HeapAfterOverBefore float64 `json:"heap_after_over_before"`
	MaxAttached         int     `json:"max_attached"`
	Samples             int     `json:"samples"`

	// CPU used during the surge window, in cores (CPU seconds per second),
	// by the supernode process and by this process (all in-process
	// clients); both share NumCPU cores with anything else on the machine.
	SupernodeCPUCores float64 `json:"supernode_cpu_cores"`
	ClientCPUCores    float64 `json:"client_process_cpu_cores"`
	NumCPU            int     `json:"num_cpu"`
	// This process's goroutine scheduling latency (runtime/metrics
	// /sched/latencies:seconds, p99 bucket bound) before and during the
	// surge, its GC cycles during the surge, and its goroutines at the
	// end of the surge.
	ClientSchedP99BeforeMs float64 `json:"client_sched_latency_p99_before_ms"`
	ClientSchedP99DuringMs float64 `json:"client_sched_latency_p99_during_ms"`
	ClientGCCycles         uint64  `json:"client_gc_cycles_during"`
	ClientGoroutines       int     `json:"client_process_goroutines"`

	// The steady part of the surge: after every surge client had made its
	// first attempt (the surge's connection setup is over; only refusals
	// remain). Diagnostics, with the early clients' keepalive p99 per
	// second of the surge.
	SteadyFromSeconds   float64   `json:"steady_from_seconds"`
	KeepaliveSteadyMs   dist      `json:"keepalive_steady_ms"`
	BusyLatencySteadyMs dist      `json:"busy_latency_steady_ms"`
	KeepaliveP99PerSec  []float64 `json:"keepalive_p99_ms_per_s"`
	// KeepaliveTrace is every early-client keepalive from the baseline
	// to the end of the surge: [ms from the surge's start (negative
	// before it) when the pong arrived, round trip in ms].
	KeepaliveTrace [][2]float64 `json:"keepalive_trace"`

	Targets surgeTargets `json:"targets"`

	// Repeat is the second surge's outcome (OVERLAYD_SURGE_REPEAT=1).
	Repeat *surgeRepeat `json:"repeat_surge,omitempty"`
}

// surgeRepeat is what a second surge did to the supernode's memory.
type surgeRepeat struct {
	HeapAfter           float64 `json:"heap_after_bytes"`
	AfterOverFirstAfter float64 `json:"heap_after_over_first_after"`
	AfterOverBefore     float64 `json:"heap_after_over_before"`
	GoroutinesDuring    float64 `json:"goroutines_during_max"`
	MaxAttached         int     `json:"max_attached"`
}

type triple struct {
	Before float64 `json:"before"`
	During float64 `json:"during_max"`
	After  float64 `json:"after"`
}

type probeFigures struct {
	BeforeN     int     `json:"before_n"`
	BeforeP99Ms float64 `json:"before_p99_bound_ms"`
	DuringN     int     `json:"during_n"`
	DuringP99Ms float64 `json:"during_p99_bound_ms"`
	SteadyN     int     `json:"steady_n"`
	SteadyP99Ms float64 `json:"steady_p99_bound_ms"`
}

type surgeTargets struct {
	AttachedWithinCapacity bool `json:"attached_within_capacity"`
	KeepaliveP99Within2x   bool `json:"keepalive_p99_within_2x"`
	HeapAfterWithin10pct   bool `json:"heap_after_within_10pct"`
	NoErrors               bool `json:"no_errors"`
	EarlyClientsStayed     bool `json:"early_clients_stayed"`
}

// surgeComparison is the same-run comparison of the two policies.
type surgeComparison struct {
	Capacity          int     `json:"capacity"`
	PeakJitter        int     `json:"peak_100ms_jitter"`
	PeakFixed         int     `json:"peak_100ms_fixed"`
	PeakRatio         float64 `json:"peak_ratio_fixed_over_jitter"`
	PeakRetryJitter   int     `json:"peak_retry_100ms_jitter"`
	PeakRetryFixed    int     `json:"peak_retry_100ms_fixed"`
	PeakRetryRatio    float64 `json:"peak_retry_ratio_fixed_over_jitter"`
	PeakSteadyJitter  int     `json:"peak_steady_100ms_jitter"`
	PeakSteadyFixed   int     `json:"peak_steady_100ms_fixed"`
	PeakSteadyRatio   float64 `json:"peak_steady_ratio_fixed_over_jitter"`
	BusyPerSecJitter  float64 `json:"busy_per_s_jitter"`
	BusyPerSecFixed   float64 `json:"busy_per_s_fixed"`
	TargetPeak5xLower bool    `json:"target_peak_5x_lower_met"`
}

// summarize computes the report's figures from the recorded events:
// baseline window [before0, before1], surge window [t0, t1].
func (r *surgeReport) summarize(rec *surgeRecorder, before0, before1, t0, t1 time.Time) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	r.SurgeSeconds = t1.Sub(t0).Seconds()
	var busyLat []time.Duration
	nWin := int(t1.Sub(t0)/surgeWindow) + 1
	all, retries := make([]int, nWin), make([]int, nWin)
	seen := map[peer.ID]bool{}
	var first0, first1 time.Time
	for _, a := range rec.attempts {
		if a.at.Before(t0) || a.at.After(t1) {
			continue
		}
		r.Attempts++
		switch a.result {
		case "busy":
			r.Busy++
			busyLat = append(busyLat, a.latency)
		case "accept":
			r.Accepted++
			if !a.early {
				r.SurgeAccepted++
			}
		case "redirect":
			r.Redirects++
		default:
			r.Errors++
		}
		w := int(a.at.Sub(t0) / surgeWindow)
		all[w]++
		if seen[a.node] {
			retries[w]++
			continue
		}
		seen[a.node] = true
		if first0.IsZero() || a.at.Before(first0) {
			first0 = a.at
		}
		if a.at.After(first1) {
			first1 = a.at
		}
	}
	if first1.IsZero() {
		first0, first1 = t0, t0
	}
	r.SteadyFromSeconds = first1.Sub(t0).Seconds()
	var busySteady []time.Duration
	for _, a := range rec.attempts {
		if a.result == "busy" && a.at.After(first1) && !a.at.After(t1) {
			busySteady = append(busySteady, a.latency)
		}
	}
	r.BusyLatencySteadyMs = distMs(busySteady)
	r.PerWindow = all
	r.Peak100ms, r.MeanOccupied = peakMean(all)
	r.PeakRetry100ms, r.MeanRetryOccupied = peakMean(retries)
	if w0 := int(first1.Sub(t0)/surgeWindow) + 1; w0 < len(all) {
		steady := all[w0:]
		for _, c := range steady {
			r.PeakSteady100ms = max(r.PeakSteady100ms, c)
			r.MeanSteady100ms += float64(c)
		}
		r.MeanSteady100ms /= float64(len(steady))
	}
	r.FirstWaveSpanMs = ms(first1.Sub(first0))
	r.BusyPerSec = float64(r.Busy) / r.SurgeSeconds
	r.BusyLatencyMs = distMs(busyLat)

	var kaBefore, kaDuring, kaSteady []time.Duration
	perSec := make([][]time.Duration, int(t1.Sub(t0)/time.Second)+1)
	for _, k := range rec.keepalives {
		if !k.at.Before(before0) && !k.at.After(t1) {
			r.KeepaliveTrace = append(r.KeepaliveTrace, [2]float64{ms(k.at.Sub(t0)), ms(k.rtt)})
		}
		switch {
		case !k.at.Before(before0) && !k.at.After(before1):
			kaBefore = append(kaBefore, k.rtt)
		case !k.at.Before(t0) && !k.at.After(t1):
			kaDuring = append(kaDuring, k.rtt)
			sec := int(k.at.Sub(t0) / time.Second)
			perSec[sec] = append(perSec[sec], k.rtt)
			if k.at.After(first1) {
				kaSteady = append(kaSteady, k.rtt)
			}
		}
	}
	r.KeepaliveBeforeMs, r.KeepaliveDuringMs, r.KeepaliveSteadyMs = distMs(kaBefore), distMs(kaDuring), distMs(kaSteady)
	for _, ds := range perSec {
		r.KeepaliveP99PerSec = append(r.KeepaliveP99PerSec, distMs(ds).P99)
	}
	r.KeepaliveP99Ratio = ratio(r.KeepaliveDuringMs.P99, r.KeepaliveBeforeMs.P99)
	r.Targets = surgeTargets{
		AttachedWithinCapacity: r.MaxAttached <= r.Scale.Capacity,
		KeepaliveP99Within2x:   r.KeepaliveP99Ratio <= 2,
		HeapAfterWithin10pct:   r.HeapAfterOverBefore <= 1.10,
		NoErrors:               r.Errors == 0,
		EarlyClientsStayed:     r.EarlyLost == 0,
	}
}

func peakMean(ws []int) (peak int, mean float64) {
	total, occupied := 0, 0
	for _, c := range ws {
		peak = max(peak, c)
		total += c
		if c > 0 {
			occupied++
		}
	}
	if occupied == 0 {
		return 0, 0
	}
	return peak, float64(total) / float64(occupied)
}

// probeP99 returns the p99 bucket bound, in milliseconds, of the probes'
// keepalive round trips between two readings of every probe, and their
// number; -1 stands for beyond the last bucket (JSON has no infinity).
func probeP99(from, to []promSample) (float64, int) {
	bound, n := histQuantile(mergeHist(from), mergeHist(to), 0.99)
	if math.IsInf(bound, 1) {
		return -1, n
	}
	return bound * 1000, n
}

// mergeHist sums the probes' keepalive histograms (same buckets).
func mergeHist(ss []promSample) []histBucket {
	var out []histBucket
	for _, s := range ss {
		h := s.histogram(seriesKeepalive)
		if out == nil {
			out = h
			continue
		}
		if len(h) != len(out) {
			return nil
		}
		for i := range h {
			out[i].count += h[i].count
		}
	}
	return out
}

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string][]int{"0": {0}, "0-1": {0, 1}, "0-3,6": {0, 1, 2, 3, 6}, "1,3-4": {1, 3, 4}} {
		got, err := parseCPUList(in)
		if err != nil {
			t.Fatalf("parseCPUList(%q): %v", in, err)
		}
		if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, want) {
			t.Errorf("parseCPUList(%q) = %v, want %v", in, keys, want)
		}
	}
	for _, bad := range []string{"", "a", "3-1", "1-", "0,,1"} {
		if _, err := parseCPUList(bad); err == nil {
			t.Errorf("parseCPUList(%q): no error", bad)
		}
	}
}
