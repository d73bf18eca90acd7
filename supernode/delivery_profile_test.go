package supernode

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	"google.golang.org/protobuf/encoding/protowire"
)

// Helpers of the delivery and home-cost benchmarks: real TCP libp2p hosts,
// and the CPU and heap profiles those benchmarks read back to attribute
// cost to the supernode under test (by goroutine label) rather than to the
// whole process.

// roleLabel is the pprof label key the benchmarks put on the goroutines of
// each role (supernode, home, member, publisher). Goroutines inherit their
// creator's labels, so everything a host started inside pprof.Do (its
// listener, connection, muxer and stream-handler goroutines, the Outbox
// writers, the link writers) carries its label.
const roleLabel = "role"

// withRole runs f with the goroutine label role=name.
func withRole(name string, f func()) {
	pprof.Do(context.Background(), pprof.Labels(roleLabel, name), func(context.Context) { f() })
}

// newTCPHost is a real libp2p host listening on 127.0.0.1 over TCP only,
// with the default security transports and stream muxer, as node/host
// builds its hosts (it sets neither, so libp2p's defaults apply: TLS 1.3
// then Noise, and yamux). The resource and connection managers are the
// null ones: the benchmarks attach 1,000 peers to one host, past libp2p's
// default limits, and node/host sizes those limits from a capacity that
// these benchmarks do not model.
func newTCPHost(tb testing.TB) host.Host {
	tb.Helper()
	h, err := tcpHost()
	if err != nil {
		tb.Fatalf("libp2p host: %v", err)
	}
	tb.Cleanup(func() { _ = h.Close() })
	return h
}

// tcpHost is newTCPHost for goroutines other than the benchmark's: the
// caller closes the host.
func tcpHost() (host.Host, error) {
	return libp2p.New(
		libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"),
		libp2p.NoTransports,
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.ResourceManager(&network.NullResourceManager{}),
		libp2p.ConnectionManager(connmgr.NullConnMgr{}),
		libp2p.DisableMetrics(),
	)
}

// processCPU returns the process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The profiles sample at the default 100 Hz: asking for more
// (runtime.SetCPUProfileRate before StartCPUProfile) gave profiles that
// held a fifth of the CPU rusage counted, here; at 100 Hz they hold most of
// it (the rest: the profile writer, and samples lost on a loaded machine).

// cpuWindow is a CPU profile in progress.
type cpuWindow struct {
	buf   bytes.Buffer
	cpu0  time.Duration
	start time.Time
}

// startCPU starts the process's CPU profile. Only one can run at a time;
// the benchmarks must not be run with -cpuprofile.
func startCPU(tb testing.TB) *cpuWindow {
	tb.Helper()
	w := &cpuWindow{}
	if err := pprof.StartCPUProfile(&w.buf); err != nil {
		tb.Fatalf("cpu profile: %v (do not run these benchmarks with -cpuprofile)", err)
	}
	w.cpu0, w.start = processCPU(), time.Now()
	return w
}

// cpuResult is a finished window: CPU by role label ("" for unlabelled
// goroutines: the runtime's GC workers, timers), the process's CPU by
// rusage, and the raw profile.
type cpuResult struct {
	byRole  map[string]time.Duration
	process time.Duration
	wall    time.Duration
	raw     []byte
}

func (w *cpuWindow) stop(tb testing.TB) cpuResult {
	tb.Helper()
	pprof.StopCPUProfile()
	res := cpuResult{process: processCPU() - w.cpu0, wall: time.Since(w.start), raw: w.buf.Bytes(), byRole: map[string]time.Duration{}}
	p, err := parseProfile(res.raw)
	if err != nil {
		tb.Fatalf("parse cpu profile: %v", err)
	}
	vi := p.valueIndex("cpu")
	for _, s := range p.samples {
		res.byRole[s.labels[roleLabel]] += time.Duration(s.values[vi])
	}
	return res
}

// saveProfile writes a window's profile to $OVERLAYD_BENCH_PROFILES/name.pprof
// when that variable names a directory (for go tool pprof -tagfocus=role=…).
func saveProfile(tb testing.TB, name string, raw []byte) {
	dir := os.Getenv("OVERLAYD_BENCH_PROFILES")
	if dir == "" {
		return
	}
	name = strings.NewReplacer("/", "_", "=", "-").Replace(name)
	path := filepath.Join(dir, name+".pprof")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		tb.Logf("save profile: %v", err)
		return
	}
	tb.Logf("profile saved: %s", path)
}

// heapAllocs returns the objects and bytes allocated so far (as the heap
// profile estimates them from its samples, as of a fresh GC) on stacks for
// which match holds of some function name. Heap profiles carry no goroutine
// labels, so the benchmarks attribute allocations by stack.
func heapAllocs(tb testing.TB, match func(fn string) bool) (objects, bytes int64) {
	tb.Helper()
	runtime.GC()
	var buf bytesBuffer
	if err := pprof.Lookup("allocs").WriteTo(&buf, 0); err != nil {
		tb.Fatalf("heap profile: %v", err)
	}
	p, err := parseProfile(buf.b)
	if err != nil {
		tb.Fatalf("parse heap profile: %v", err)
	}
	oi, bi := p.valueIndex("alloc_objects"), p.valueIndex("alloc_space")
	for _, s := range p.samples {
		for _, loc := range s.locs {
			if p.anyFunc(loc, match) {
				objects += s.values[oi]
				bytes += s.values[bi]
				break
			}
		}
	}
	return objects, bytes
}

// sampleAllocs makes the heap profile sample an allocation every 4 KiB
// (default 512 KiB) until the benchmark ends, so that a few hundred
// deliveries' allocations are seen. Set once, before the fixture: the heap
// profile scales every sample by the rate in force when it is written.
func sampleAllocs(b *testing.B) {
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 4096
	b.Cleanup(func() { runtime.MemProfileRate = old })
}

// bytesBuffer is an io.Writer into a byte slice.
type bytesBuffer struct{ b []byte }

func (w *bytesBuffer) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

// profile is the part of a pprof profile (profile.proto) these benchmarks
// read: sample types, samples with their labels and locations, and the
// function names at each location.
type profile struct {
	types   []string
	samples []profSample
	locFns  map[uint64][]uint64 // location → function ids (inlined first)
	fnNames map[uint64]string
}

type profSample struct {
	locs   []uint64
	values []int64
	labels map[string]string
}

func (p *profile) valueIndex(typ string) int {
	for i, t := range p.types {
		if t == typ {
			return i
		}
	}
	return len(p.types) - 1
}

func (p *profile) anyFunc(loc uint64, match func(string) bool) bool {
	for _, f := range p.locFns[loc] {
		if match(p.fnNames[f]) {
			return true
		}
	}
	return false
}

// parseProfile decodes a gzipped pprof profile: a few dozen lines of
// protowire instead of a new module dependency.
func parseProfile(data []byte) (*profile, error) {
	if len(data) == 0 {
		return &profile{}, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	var (
		strs      []string
		typeIdx   []int64
		rawLabels []map[int64]int64 // per sample: key idx → str idx
		p         = &profile{locFns: map[uint64][]uint64{}, fnNames: map[uint64]string{}}
		fnNameIdx = map[uint64]int64{}
	)
	err = eachField(raw, func(num protowire.Number, typ protowire.Type, v uint64, b []byte) error {
		switch num {
		case 1: // sample_type
			return eachField(b, func(n protowire.Number, _ protowire.Type, v uint64, _ []byte) error {
				if n == 1 {
					typeIdx = append(typeIdx, int64(v))
				}
				return nil
			})
		case 2: // sample
			var s profSample
			lbl := map[int64]int64{}
			err := eachField(b, func(n protowire.Number, t protowire.Type, v uint64, bb []byte) error {
				switch n {
				case 1:
					return eachVarint(t, v, bb, func(x uint64) { s.locs = append(s.locs, x) })
				case 2:
					return eachVarint(t, v, bb, func(x uint64) { s.values = append(s.values, int64(x)) })
				case 3:
					var k, str int64
					err := eachField(bb, func(n protowire.Number, _ protowire.Type, v uint64, _ []byte) error {
						switch n {
						case 1:
							k = int64(v)
						case 2:
							str = int64(v)
						}
						return nil
					})
					lbl[k] = str
					return err
				}
				return nil
			})
			p.samples = append(p.samples, s)
			rawLabels = append(rawLabels, lbl)
			return err
		case 4: // location
			var id uint64
			var fns []uint64
			err := eachField(b, func(n protowire.Number, _ protowire.Type, v uint64, bb []byte) error {
				switch n {
				case 1:
					id = v
				case 4:
					return eachField(bb, func(n protowire.Number, _ protowire.Type, v uint64, _ []byte) error {
						if n == 1 {
							fns = append(fns, v)
						}
						return nil
					})
				}
				return nil
			})
			p.locFns[id] = fns
			return err
		case 5: // function
			var id uint64
			var name int64
			err := eachField(b, func(n protowire.Number, _ protowire.Type, v uint64, _ []byte) error {
				switch n {
				case 1:
					id = v
				case 2:
					name = int64(v)
				}
				return nil
			})
			fnNameIdx[id] = name
			return err
		case 6: // string_table
			strs = append(strs, string(b))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	str := func(i int64) string {
		if i >= 0 && int(i) < len(strs) {
			return strs[i]
		}
		return ""
	}
	for _, i := range typeIdx {
		p.types = append(p.types, str(i))
	}
	for i := range p.samples {
		p.samples[i].labels = map[string]string{}
		for k, v := range rawLabels[i] {
			p.samples[i].labels[str(k)] = str(v)
		}
	}
	for id, n := range fnNameIdx {
		p.fnNames[id] = str(n)
	}
	return p, nil
}

// eachField calls f for each field of a protobuf message: v for varints
// (and fixed-width values), b for length-delimited ones.
func eachField(b []byte, f func(protowire.Number, protowire.Type, uint64, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v uint64
		var bb []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			bb, n = protowire.ConsumeBytes(b)
		case protowire.Fixed64Type:
			v, n = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var x uint32
			x, n = protowire.ConsumeFixed32(b)
			v = uint64(x)
		default:
			return fmt.Errorf("profile: wire type %d", typ)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, typ, v, bb); err != nil {
			return err
		}
	}
	return nil
}

// eachVarint handles a repeated integer field, packed or not.
func eachVarint(t protowire.Type, v uint64, b []byte, f func(uint64)) error {
	if t == protowire.VarintType {
		f(v)
		return nil
	}
	for len(b) > 0 {
		x, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		f(x)
		b = b[n:]
	}
	return nil
}

// loadAvg returns /proc/loadavg's first three fields.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
