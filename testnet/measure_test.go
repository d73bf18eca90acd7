package testnet

// The measuring helpers the benchmark harnesses share (surge_*,
// recovery_*, messaging_*): percentiles, readings of this process's
// runtime, Prometheus readings, waits, environment overrides and report
// files. Each exists once here; a harness keeps only what measures its own
// scenario.

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ---- Percentiles.

// dist summarises a distribution with nearest-rank percentiles.
type dist struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// rank returns the 0-based index of the nearest-rank q-quantile of n
// sorted values.
func rank(n int, q float64) int {
	return min(max(int(math.Ceil(q*float64(n)))-1, 0), n-1)
}

// distOf returns the percentiles of vs (left unsorted).
func distOf(vs []float64) dist {
	if len(vs) == 0 {
		return dist{}
	}
	vs = slices.Clone(vs)
	slices.Sort(vs)
	q := func(p float64) float64 { return vs[rank(len(vs), p)] }
	return dist{N: len(vs), P50: q(0.5), P90: q(0.9), P99: q(0.99), Max: vs[len(vs)-1]}
}

// distMs returns the percentiles of ds in milliseconds; it sorts ds in
// place, which callers that read ranks afterwards rely on.
func distMs(ds []time.Duration) dist {
	if len(ds) == 0 {
		return dist{}
	}
	slices.Sort(ds)
	q := func(p float64) float64 { return ms(ds[rank(len(ds), p)]) }
	return dist{N: len(ds), P50: q(0.5), P90: q(0.9), P99: q(0.99), Max: ms(ds[len(ds)-1])}
}

// ms returns d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ratio returns a/b, or 0 when b is 0 (JSON has no infinity).
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// ---- This process's runtime.

// rtMark is a reading of this process's counters: CPU time (getrusage),
// scheduling latencies, GC pauses and cycles (runtime/metrics).
type rtMark struct {
	at       time.Time
	cpu      time.Duration
	sched    *metrics.Float64Histogram
	pauses   *metrics.Float64Histogram
	gcCycles uint64
}

// markRuntime reads the process's counters now.
func markRuntime() rtMark {
	ss := []metrics.Sample{{Name: "/sched/latencies:seconds"}, {Name: "/sched/pauses/total/gc:seconds"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(ss)
	m := rtMark{at: time.Now(), cpu: processCPU()}
	if ss[0].Value.Kind() == metrics.KindFloat64Histogram {
		m.sched = ss[0].Value.Float64Histogram()
	}
	if ss[1].Value.Kind() == metrics.KindFloat64Histogram {
		m.pauses = ss[1].Value.Float64Histogram()
	}
	if ss[2].Value.Kind() == metrics.KindUint64 {
		m.gcCycles = ss[2].Value.Uint64()
	}
	return m
}

// processCPU returns the process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runtimeBucket returns the index of the bucket that holds the
// nearest-rank q-quantile of the observations made between two readings
// of a runtime histogram, and their number (-1 and 0 without any).
func runtimeBucket(a, b *metrics.Float64Histogram, q float64) (int, uint64) {
	if a == nil || b == nil || len(a.Counts) != len(b.Counts) {
		return -1, 0
	}
	var total uint64
	for i := range b.Counts {
		total += b.Counts[i] - a.Counts[i]
	}
	if total == 0 {
		return -1, 0
	}
	r := max(uint64(math.Ceil(q*float64(total))), 1)
	var cum uint64
	for i := range b.Counts {
		if cum += b.Counts[i] - a.Counts[i]; cum >= r {
			return i, total
		}
	}
	return -1, total
}

// runtimeQuantile returns the q-quantile, in seconds, of the observations
// between two readings of a runtime histogram, as the upper bound of its
// bucket (the lower bound for the open top bucket), or 0 without
// observations.
func runtimeQuantile(a, b *metrics.Float64Histogram, q float64) float64 {
	i, _ := runtimeBucket(a, b, q)
	if i < 0 {
		return 0
	}
	if hi := b.Buckets[i+1]; !math.IsInf(hi, 1) {
		return hi
	}
	return b.Buckets[i]
}

// runtimeDistMs returns the percentiles, in milliseconds, of the
// observations between two readings of a runtime histogram, as bucket
// upper bounds; -1 stands for the open top bucket (JSON has no infinity).
func runtimeDistMs(a, b *metrics.Float64Histogram) dist {
	_, n := runtimeBucket(a, b, 1)
	if n == 0 {
		return dist{}
	}
	at := func(q float64) float64 {
		i, _ := runtimeBucket(a, b, q)
		if i < 0 || math.IsInf(b.Buckets[i+1], 1) {
			return -1
		}
		return 1000 * b.Buckets[i+1]
	}
	return dist{N: int(n), P50: at(0.5), P90: at(0.9), P99: at(0.99), Max: at(1)}
}

// runtimeFigures is what this process did between two marks: the whole
// in-process network runs in it, so a starved or stalled process shows up
// as late keepalives and slow sample scans. It tells the harness's limits
// apart from the overlay's.
type runtimeFigures struct {
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

// runtimeBetween returns the process's figures from a to b.
func runtimeBetween(a, b rtMark) runtimeFigures {
	wall := b.at.Sub(a.at).Seconds()
	r := runtimeFigures{Seconds: wall, GCCycles: b.gcCycles - a.gcCycles, Goroutines: runtime.NumGoroutine(), LoadAvg: loadAvg()}
	if wall > 0 {
		r.CPUCores = (b.cpu - a.cpu).Seconds() / wall
	}
	r.SchedP99Ms = 1000 * runtimeQuantile(a.sched, b.sched, 0.99)
	r.SchedMaxMs = 1000 * runtimeQuantile(a.sched, b.sched, 1)
	r.GCPauseMaxMs = 1000 * runtimeQuantile(a.pauses, b.pauses, 1)
	return r
}

// loadAvg returns the 1, 5 and 15 minute load averages from /proc/loadavg
// (empty where there is none).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// machineStat is the machine's busy CPU time so far, in clock ticks.
type machineStat struct {
	busy uint64
	ok   bool
}

// userHZ is the unit of /proc/stat: USER_HZ, 100 on Linux.
const userHZ = 100

// readMachineStat reads the "cpu" line of /proc/stat: user nice system
// idle iowait irq softirq steal …; busy is everything but idle and iowait.
func readMachineStat() machineStat {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineStat{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return machineStat{}
	}
	var st machineStat
	for i, s := range f[1:9] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return machineStat{}
		}
		if i != 3 && i != 4 {
			st.busy += v
		}
	}
	st.ok = true
	return st
}

// ---- Prometheus readings.

// promSample is one reading of a node's metrics: series (the name, with
// its labels as the text format exposes them: name{label="value"}) to
// value.
type promSample map[string]float64

// gather reads every counter and gauge of reg once, by name for an
// unlabelled series and as name{label="value"} for a series with one label
// (an empty sample when reg is nil or cannot be read).
func gather(reg *prometheus.Registry) promSample {
	out := promSample{}
	if reg == nil {
		return out
	}
	mfs, err := reg.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var v float64
			switch {
			case m.GetCounter() != nil:
				v = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				v = m.GetGauge().GetValue()
			default:
				continue
			}
			switch ls := m.GetLabel(); len(ls) {
			case 0:
				out[mf.GetName()] = v
			case 1:
				out[fmt.Sprintf("%s{%s=%q}", mf.GetName(), ls[0].GetName(), ls[0].GetValue())] = v
			}
		}
	}
	return out
}

// parseProm reads a /metrics page in the Prometheus text format.
func parseProm(r io.Reader) (promSample, error) {
	s := promSample{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: %q: %v", line, err)
		}
		s[line[:i]] = v
	}
	return s, sc.Err()
}

// histogram returns the cumulative buckets of a Prometheus histogram, by
// upper bound, in increasing order.
func (s promSample) histogram(name string) []histBucket {
	var out []histBucket
	prefix := name + `_bucket{le="`
	for k, v := range s {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		le, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimPrefix(k, prefix), `"}`), 64)
		if err != nil {
			continue
		}
		out = append(out, histBucket{le, v})
	}
	slices.SortFunc(out, func(x, y histBucket) int { return cmp.Compare(x.le, y.le) })
	return out
}

type histBucket struct{ le, count float64 }

// histQuantile returns the upper bound of the bucket holding quantile q of
// the observations made between two readings of the same cumulative
// Prometheus histogram (+Inf if beyond the last finite bound, 0 without
// observations), and their number.
func histQuantile(from, to []histBucket, q float64) (bound float64, n int) {
	if len(to) == 0 || len(from) != len(to) {
		return 0, 0
	}
	total := to[len(to)-1].count - from[len(from)-1].count
	if total <= 0 {
		return 0, 0
	}
	for i := range to {
		if to[i].count-from[i].count >= q*total {
			return to[i].le, int(total)
		}
	}
	return math.Inf(1), int(total)
}

// ---- Waiting.

// waitFor waits, polling every tick, until cond holds or d has passed.
func waitFor(ctx context.Context, d, tick time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return poll(ctx, tick, cond)
}

// ---- Environment overrides.

// envDuration sets *d from the environment variable name, if set, failing
// the benchmark when it is not a duration within [lo, hi].
func envDuration(b *testing.B, name string, lo, hi time.Duration, d *time.Duration) {
	b.Helper()
	envParse(b, name, "a duration", time.ParseDuration, lo, hi, d)
}

// envInt sets *v from the environment variable name, if set, failing the
// benchmark when it is not an integer within [lo, hi].
func envInt(b *testing.B, name string, v *int, lo, hi int) {
	b.Helper()
	envParse(b, name, "an integer", strconv.Atoi, lo, hi, v)
}

// envParse sets *v from the environment variable name, if set, failing
// the benchmark when parse refuses it or it is not within [lo, hi].
func envParse[T cmp.Ordered](b *testing.B, name, what string, parse func(string) (T, error), lo, hi T, v *T) {
	b.Helper()
	s := os.Getenv(name)
	if s == "" {
		return
	}
	x, err := parse(s)
	if err != nil || x < lo || x > hi {
		b.Fatalf("%s=%q: want %s within [%v, %v]", name, s, what, lo, hi)
	}
	*v = x
}

// ---- Report files.

// reportDir is $OVERLAYD_REPORT_DIR: where the benchmarks write their
// reports ("" for nowhere).
func reportDir() string { return os.Getenv("OVERLAYD_REPORT_DIR") }

// writeReport writes v as $OVERLAYD_REPORT_DIR/name and appends it as one
// line to runsFile there, so medians survive -count; without
// OVERLAYD_REPORT_DIR it does nothing.
func writeReport(b *testing.B, runsFile, name string, v any) {
	b.Helper()
	dir := reportDir()
	if dir == "" {
		return
	}
	buf, err := json.MarshalIndent(v, "", "  ")
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name), append(buf, '\n'), 0o644)
	}
	var line []byte
	if err == nil {
		line, err = json.Marshal(map[string]any{"file": name, "at": time.Now().UTC(), "report": v})
	}
	if err == nil {
		var f *os.File
		if f, err = os.OpenFile(filepath.Join(dir, runsFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_, err = f.Write(append(line, '\n'))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
	}
	if err != nil {
		b.Errorf("report %s: %v", name, err)
	}
}

// saveReport copies r to $OVERLAYD_REPORT_DIR/name when keep is true and
// the variable is set, and otherwise drains it.
func saveReport(name string, r io.Reader, keep bool) error {
	dir := reportDir()
	if !keep || dir == "" || name == "" {
		_, err := io.Copy(io.Discard, r)
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
