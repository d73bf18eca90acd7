package testnet

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/pprof"
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

// msgRoleLabel is the pprof label key naming the role of a goroutine:
// testnet.Config.ProfileLabels sets it to each node's kind.
const msgRoleLabel = RoleLabel

// Roles, as msgRoleLabel values.
const (
	msgRoleSupernode = KindSupernode
	msgRoleClient    = KindClient
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
	m0        rtMark
	st0       machineStat
	profiling bool
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
	SchedMs  dist   `json:"sched_latency_ms"`
	GCCycles uint64 `json:"gc_cycles"`
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
	w := &msgCPUWindow{m0: markRuntime(), st0: readMachineStat()}
	w.profiling = pprof.StartCPUProfile(&w.buf) == nil
	return w
}

// stop ends the window. With OVERLAYD_REPORT_DIR set, the profile is
// saved there as save (when not "").
func (w *msgCPUWindow) stop(save string) (msgCPUUse, error) {
	if w.profiling {
		pprof.StopCPUProfile()
		_ = saveReport(save, bytes.NewReader(w.buf.Bytes()), true)
	}
	m1 := markRuntime()
	u := msgCPUUse{WallS: m1.at.Sub(w.m0.at).Seconds(), ProcessS: (m1.cpu - w.m0.cpu).Seconds()}
	if st1 := readMachineStat(); st1.ok && w.st0.ok && u.WallS > 0 {
		u.MachineBusyCores = float64(st1.busy-w.st0.busy) / userHZ / u.WallS
	}
	fmt.Sscan(loadAvg(), &u.LoadAvg1)
	u.SchedMs = runtimeDistMs(w.m0.sched, m1.sched)
	u.GCCycles = m1.gcCycles - w.m0.gcCycles
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
