package testnet

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// CPU accounting for the messaging benchmarks. Every node of a scenario
// runs in this process, so the process's CPU time (getrusage) mixes the
// supernodes, the clients, the harness and the Go runtime. To attribute it,
// each node is started inside pprof.Do with the label msgRoleLabel set to
// its role: goroutines inherit the labels of the goroutine that starts them,
// so everything a node's Start launches (libp2p host and its connections,
// GossipSub, the router, the fanout workers, the admission's outboxes) and
// everything those goroutines launch later carries the node's role. A CPU
// profile taken over the measurement window then splits the samples by
// role. Runtime work (GC, the scheduler, time.AfterFunc callbacks) carries
// no label and is reported as "unlabelled".

// msgRoleLabel is the pprof label key naming the role of a goroutine.
const msgRoleLabel = "overlayd_role"

// Roles, as msgRoleLabel values.
const (
	msgRoleSupernode = "supernode"
	msgRoleClient    = "client"
	msgRoleHarness   = "harness"
)

// msgWithRole runs f with the role label set, so that goroutines f starts
// are attributed to role.
func msgWithRole(ctx context.Context, role string, f func(context.Context)) {
	pprof.Do(ctx, pprof.Labels(msgRoleLabel, role), f)
}

// msgCPUWindow measures one window: process CPU from getrusage and, when a
// CPU profile could be started (not under go test -cpuprofile), CPU by role.
type msgCPUWindow struct {
	buf       bytes.Buffer
	t0        time.Time
	ru0       time.Duration
	rt0       []metrics.Sample
	st0       msgStat
	profiling bool
}

// msgRuntimeMetrics are read at both ends of a window: how long runnable
// goroutines waited for a P (the process's scheduling latency, which
// grows when the process wants more CPU than it gets) and GC cycles.
var msgRuntimeMetrics = []string{"/sched/latencies:seconds", "/gc/cycles/total:gc-cycles"}

func msgReadRuntime() []metrics.Sample {
	s := make([]metrics.Sample, len(msgRuntimeMetrics))
	for i, name := range msgRuntimeMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	return s
}

// msgCPUUse is what one window used. Seconds are CPU seconds.
type msgCPUUse struct {
	WallS    float64 `json:"wall_s"`
	ProcessS float64 `json:"process_cpu_s"`
	// ByRoleS is CPU seconds by role from the profile ("unlabelled" for
	// samples without a role); nil when no profile could be taken.
	ByRoleS map[string]float64 `json:"by_role_cpu_s,omitempty"`
	// ProfiledS is the CPU time the profile saw in all; the profile samples
	// at 100 Hz, so it is within a few percent of ProcessS.
	ProfiledS float64 `json:"profiled_cpu_s"`
	// SchedMs is the Go scheduler latency in the window (runtime/metrics
	// /sched/latencies, bucket upper bounds); GCCycles the collections.
	SchedMs  msgPercentiles `json:"sched_latency_ms"`
	GCCycles uint64         `json:"gc_cycles"`
	// MachineBusyCores is the whole machine's non-idle CPU in the window
	// (/proc/stat), this process included: the rest is other people's
	// work on a shared machine. LoadAvg1 is the 1-minute load average at
	// the window's end.
	MachineBusyCores float64 `json:"machine_busy_cores"`
	LoadAvg1         float64 `json:"loadavg_1m"`
}

// cores returns CPU seconds of role per wall second (-1 without a profile).
func (u msgCPUUse) cores(role string) float64 {
	if u.ByRoleS == nil || u.WallS <= 0 {
		return -1
	}
	return u.ByRoleS[role] / u.WallS
}

func msgStartCPU() *msgCPUWindow {
	w := &msgCPUWindow{t0: time.Now(), ru0: msgRusage(), rt0: msgReadRuntime(), st0: msgReadStat()}
	w.profiling = pprof.StartCPUProfile(&w.buf) == nil
	return w
}

// stop ends the window. With OVERLAYD_REPORT_DIR set, the profile is
// saved there as save (when not "").
func (w *msgCPUWindow) stop(save string) (msgCPUUse, error) {
	if w.profiling {
		pprof.StopCPUProfile()
		if dir := os.Getenv("OVERLAYD_REPORT_DIR"); dir != "" && save != "" {
			if err := os.MkdirAll(dir, 0o755); err == nil {
				_ = os.WriteFile(filepath.Join(dir, save), w.buf.Bytes(), 0o644)
			}
		}
	}
	u := msgCPUUse{WallS: time.Since(w.t0).Seconds(), ProcessS: (msgRusage() - w.ru0).Seconds()}
	rt1 := msgReadRuntime()
	if st1 := msgReadStat(); st1.ok && w.st0.ok && u.WallS > 0 {
		u.MachineBusyCores = float64(st1.busy-w.st0.busy) / msgUserHZ / u.WallS
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Sscan(string(b), &u.LoadAvg1)
	}
	if rt1[0].Value.Kind() == metrics.KindFloat64Histogram && w.rt0[0].Value.Kind() == metrics.KindFloat64Histogram {
		u.SchedMs = msgHistDelta(w.rt0[0].Value.Float64Histogram(), rt1[0].Value.Float64Histogram())
	}
	if rt1[1].Value.Kind() == metrics.KindUint64 && w.rt0[1].Value.Kind() == metrics.KindUint64 {
		u.GCCycles = rt1[1].Value.Uint64() - w.rt0[1].Value.Uint64()
	}
	if !w.profiling {
		return u, nil
	}
	by, err := msgCPUByLabel(w.buf.Bytes(), msgRoleLabel)
	if err != nil {
		return u, err
	}
	u.ByRoleS = map[string]float64{}
	for k, v := range by {
		if k == "" {
			k = "unlabelled"
		}
		u.ByRoleS[k] = v.Seconds()
		u.ProfiledS += v.Seconds()
	}
	return u, nil
}

// msgHistDelta returns the percentiles (bucket upper bounds, ms) of the
// observations between two readings of one runtime histogram.
func msgHistDelta(a, b *metrics.Float64Histogram) msgPercentiles {
	if len(a.Counts) != len(b.Counts) {
		return msgPercentiles{}
	}
	var n uint64
	d := make([]uint64, len(b.Counts))
	for i := range d {
		d[i] = b.Counts[i] - a.Counts[i]
		n += d[i]
	}
	if n == 0 {
		return msgPercentiles{}
	}
	at := func(q float64) float64 {
		rank := uint64(math.Ceil(q * float64(n)))
		var c uint64
		for i, k := range d {
			if c += k; c >= rank {
				return 1000 * min(b.Buckets[i+1], math.MaxFloat64)
			}
		}
		return math.Inf(1)
	}
	p := msgPercentiles{N: int(n), P50: at(0.5), P90: at(0.9), P99: at(0.99), Max: at(1)}
	for _, v := range []*float64{&p.P50, &p.P90, &p.P99, &p.Max} {
		if math.IsInf(*v, 0) {
			*v = -1 // JSON has no infinity: the open top bucket
		}
	}
	return p
}

// msgStat is the machine's busy CPU time so far, in clock ticks.
type msgStat struct {
	busy uint64
	ok   bool
}

// msgUserHZ is the unit of /proc/stat: USER_HZ, 100 on Linux.
const msgUserHZ = 100

// msgReadStat reads the "cpu" line of /proc/stat: user nice system idle
// iowait irq softirq steal …; busy is everything but idle and iowait.
func msgReadStat() msgStat {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return msgStat{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return msgStat{}
	}
	var st msgStat
	for i, s := range f[1:9] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return msgStat{}
		}
		if i != 3 && i != 4 {
			st.busy += v
		}
	}
	st.ok = true
	return st
}

// msgRusage returns the process's user + system CPU time so far.
func msgRusage() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// msgCPUByLabel sums the CPU time of a gzipped pprof CPU profile by the
// value of one label key ("" for samples without it). It decodes only the
// fields it needs of perftools.profiles.Profile: sample_type (1), sample (2:
// value 2, label 3) and string_table (6).
func msgCPUByLabel(gz []byte, key string) (map[string]time.Duration, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	type label struct{ key, str int64 }
	type sample struct {
		values []int64
		labels []label
	}
	var (
		types   [][2]int64 // (type, unit) string indexes
		samples []sample
		strs    []string
	)
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return nil, fmt.Errorf("cpu profile: %w", protowire.ParseError(n))
		}
		raw = raw[n:]
		if typ != protowire.BytesType || (num != 1 && num != 2 && num != 6) {
			if n = protowire.ConsumeFieldValue(num, typ, raw); n < 0 {
				return nil, fmt.Errorf("cpu profile: %w", protowire.ParseError(n))
			}
			raw = raw[n:]
			continue
		}
		b, n := protowire.ConsumeBytes(raw)
		if n < 0 {
			return nil, fmt.Errorf("cpu profile: %w", protowire.ParseError(n))
		}
		raw = raw[n:]
		switch num {
		case 1:
			f, err := msgVarints(b, map[protowire.Number]bool{1: true, 2: true})
			if err != nil {
				return nil, err
			}
			types = append(types, [2]int64{f[1], f[2]})
		case 2:
			var s sample
			for len(b) > 0 {
				fn, ft, m := protowire.ConsumeTag(b)
				if m < 0 {
					return nil, fmt.Errorf("cpu profile sample: %w", protowire.ParseError(m))
				}
				b = b[m:]
				switch {
				case fn == 2 && ft == protowire.VarintType:
					v, m := protowire.ConsumeVarint(b)
					if m < 0 {
						return nil, fmt.Errorf("cpu profile value: %w", protowire.ParseError(m))
					}
					s.values = append(s.values, int64(v))
					b = b[m:]
				case fn == 2 && ft == protowire.BytesType: // packed
					p, m := protowire.ConsumeBytes(b)
					if m < 0 {
						return nil, fmt.Errorf("cpu profile values: %w", protowire.ParseError(m))
					}
					b = b[m:]
					for len(p) > 0 {
						v, k := protowire.ConsumeVarint(p)
						if k < 0 {
							return nil, fmt.Errorf("cpu profile values: %w", protowire.ParseError(k))
						}
						s.values = append(s.values, int64(v))
						p = p[k:]
					}
				case fn == 3 && ft == protowire.BytesType:
					p, m := protowire.ConsumeBytes(b)
					if m < 0 {
						return nil, fmt.Errorf("cpu profile label: %w", protowire.ParseError(m))
					}
					b = b[m:]
					f, err := msgVarints(p, map[protowire.Number]bool{1: true, 2: true})
					if err != nil {
						return nil, err
					}
					s.labels = append(s.labels, label{f[1], f[2]})
				default:
					m := protowire.ConsumeFieldValue(fn, ft, b)
					if m < 0 {
						return nil, fmt.Errorf("cpu profile sample: %w", protowire.ParseError(m))
					}
					b = b[m:]
				}
			}
			samples = append(samples, s)
		case 6:
			strs = append(strs, string(b))
		}
	}
	str := func(i int64) string {
		if i < 0 || int(i) >= len(strs) {
			return ""
		}
		return strs[i]
	}
	vi := -1
	for i, t := range types {
		if str(t[0]) == "cpu" && str(t[1]) == "nanoseconds" {
			vi = i
		}
	}
	if vi < 0 {
		return nil, errors.New("cpu profile: no cpu/nanoseconds sample type")
	}
	out := map[string]time.Duration{}
	for _, s := range samples {
		if vi >= len(s.values) {
			continue
		}
		role := ""
		for _, l := range s.labels {
			if str(l.key) == key {
				role = str(l.str)
			}
		}
		out[role] += time.Duration(s.values[vi])
	}
	return out, nil
}

// msgVarints decodes a message of varint fields, keeping the wanted ones.
func msgVarints(b []byte, want map[protowire.Number]bool) (map[protowire.Number]int64, error) {
	out := map[protowire.Number]int64{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("cpu profile: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if typ == protowire.VarintType && want[num] {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return nil, fmt.Errorf("cpu profile: %w", protowire.ParseError(m))
			}
			out[num] = int64(v)
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return nil, fmt.Errorf("cpu profile: %w", protowire.ParseError(m))
		}
		b = b[m:]
	}
	return out, nil
}

// TestMsgCPUByLabel checks the profile decoding on a real CPU profile: a
// goroutine spinning under one label must show up under it.
func TestMsgCPUByLabel(t *testing.T) {
	w := msgStartCPU()
	if !w.profiling {
		t.Skip("a CPU profile is already running (go test -cpuprofile)")
	}
	done := make(chan struct{})
	msgWithRole(context.Background(), "spin", func(context.Context) {
		go func() {
			defer close(done)
			n := 0
			for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); n++ {
			}
			_ = n
		}()
	})
	<-done
	u, err := w.stop("")
	if err != nil {
		t.Fatal(err)
	}
	if u.ByRoleS["spin"] <= 0 {
		t.Fatalf("no CPU attributed to the spinning goroutine's label: %+v", u)
	}
	if u.ProfiledS > u.ProcessS*1.5+0.05 {
		t.Fatalf("profile saw %.3f s of CPU, getrusage %.3f s", u.ProfiledS, u.ProcessS)
	}
}
