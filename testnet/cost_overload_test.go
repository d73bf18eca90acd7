package testnet

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/protocol/pb"
)

// The cost benchmarks against the real binary: the supernode is an
// `overlayd run --role supernode` process (buildOverlayd, startSupernode:
// capacity costCapacity, keepalive 1 s) and its CPU is read from
// /proc/<pid>/stat around the timed loop, so "daemon-cpu-µs/op" is the
// supernode's side alone, runtime and GC included (10 ms ticks: a 3 s run
// of ~1 ms operations resolves it to about 1%). The clients are this
// process's bare hosts (cost_test.go).

// costDaemon is a running supernode process.
type costDaemon struct {
	d   *daemon
	pid string
	ai  peer.AddrInfo
}

// costStartDaemon starts the real supernode; cpus pins it (taskset list,
// "" for none).
func costStartDaemon(ctx context.Context, b *testing.B, cpus string) *costDaemon {
	b.Helper()
	bin := buildOverlayd(b)
	d, id, addr := startSupernode(ctx, b, launcher{cpus: cpus}, bin, b.TempDir(), costCapacity, 10*time.Second)
	m, err := ma.NewMultiaddr(addr)
	if err != nil {
		b.Fatal(err)
	}
	ai, err := peer.AddrInfoFromP2pAddr(m)
	if err != nil || ai.ID != id {
		b.Fatalf("supernode address %s: %v", addr, err)
	}
	return &costDaemon{d: d, pid: strconv.Itoa(d.cmd.Process.Pid), ai: *ai}
}

// cpu is the daemon's CPU time so far.
func (cd *costDaemon) cpu(b *testing.B) time.Duration {
	b.Helper()
	c, ok := satProcCPU(cd.pid)
	if !ok {
		b.Fatalf("supernode: no /proc/%s/stat", cd.pid)
	}
	return c
}

// BenchmarkCostDaemon (OVERLAYD_COST_DAEMON=1; skipped otherwise and under
// -short: it builds the binary) measures the attach and keepalive costs
// of BenchmarkCostAttach and BenchmarkCostKeepalive on the real binary.
//
//	OVERLAYD_COST_DAEMON=1 go test -run '^$' -bench 'BenchmarkCostDaemon' -benchtime 3s -count 3 ./testnet
func BenchmarkCostDaemon(b *testing.B) {
	if testing.Short() || os.Getenv("OVERLAYD_COST_DAEMON") != "1" {
		b.Skip("set OVERLAYD_COST_DAEMON=1 (builds and runs the overlayd binary)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cd := costStartDaemon(ctx, b, "")
	clients := make([]*costClient, costWorkers)
	for i := range clients {
		clients[i] = newCostClient(ctx, b, true)
	}
	if err := waitFor(ctx, 15*time.Second, 20*time.Millisecond, func() bool {
		st, s, err := clients[0].attach(ctx, cd.ai)
		if s != nil {
			s.detach()
		}
		return err == nil && st == pb.AttachResponse_STATUS_ACCEPT
	}); err != nil {
		b.Fatalf("supernode never accepted: %v", err)
	}
	measure := func(b *testing.B, op func(w int) error) {
		c0 := cd.cpu(b)
		costMeasure(ctx, b, false, op)
		b.ReportMetric(float64((cd.cpu(b)-c0).Microseconds())/float64(b.N), "daemon-cpu-µs/op")
	}
	attempt := func(want pb.AttachResponse_Status, fresh bool) func(w int) error {
		return costAttempt(ctx, clients, cd.ai, want, fresh)
	}
	conns := map[bool]string{true: "fresh", false: "existing"}
	for _, fresh := range []bool{true, false} {
		b.Run("answer=accept/conn="+conns[fresh], func(b *testing.B) {
			measure(b, attempt(pb.AttachResponse_STATUS_ACCEPT, fresh))
		})
	}
	sess, hold := costHoldAI(ctx, b, cd.ai, costCapacity, 500*time.Millisecond)
	for _, fresh := range []bool{true, false} {
		b.Run("answer=busy/conn="+conns[fresh], func(b *testing.B) {
			measure(b, attempt(pb.AttachResponse_STATUS_BUSY, fresh))
		})
	}
	hold()
	// The keepalive: the held sessions are gone; attach costCapacity new
	// ones and ping each every 10 ms.
	sess, hold = costHoldAI(ctx, b, cd.ai, costCapacity, time.Hour)
	b.Run("keepalive/sessions=16", func(b *testing.B) {
		c0 := cd.cpu(b)
		costRun(ctx, b, false, func() { costPing(b, sess, 10*time.Millisecond) })
		b.ReportMetric(float64((cd.cpu(b)-c0).Microseconds())/float64(b.N), "daemon-cpu-µs/op")
	})
	hold()
}

// costHoldAI is costHold for any supernode address: k sessions pinged
// every ka (the returned sessions must not be pinged by the caller while
// ka is short). The function returned detaches them.
func costHoldAI(ctx context.Context, b *testing.B, ai peer.AddrInfo, k int, ka time.Duration) ([]*costSession, func()) {
	b.Helper()
	hctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var failed atomic.Value
	sess := make([]*costSession, k)
	for i := range k {
		c := newCostClient(ctx, b, false)
		st, s, err := c.attach(ctx, ai)
		if err != nil || st != pb.AttachResponse_STATUS_ACCEPT {
			cancel()
			b.Fatalf("hold %d: answered %v: %v", i, st, err)
		}
		sess[i] = s
		wg.Go(func() {
			t := time.NewTicker(ka)
			defer t.Stop()
			for {
				select {
				case <-hctx.Done():
					return
				case <-t.C:
				}
				if err := s.ping(5 * time.Second); err != nil && hctx.Err() == nil {
					failed.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	return sess, func() {
		cancel()
		wg.Wait()
		for _, s := range sess {
			s.detach()
		}
		if err := failed.Load(); err != nil {
			b.Errorf("a held session failed: %v", err)
		}
	}
}

// BenchmarkCostOverload (OVERLAYD_COST_OVERLOAD=1; skipped otherwise and
// under -short) is what overload does to a real supernode: the overlayd
// binary with GOMAXPROCS=1, pinned to one CPU (the first CPU this process
// may not use, else CPU 0; run the benchmark under `taskset -c 1` so that
// the load generator does not share it), capacity costCapacity, all slots
// held by sessions that ping every 500 ms and time their pongs. Then
// clients (bare hosts, no GossipSub) attempt to attach open-loop at
// increasing rates, costStep each, at most costInFlight at once (an
// attempt that finds none free is counted "not sent"): conn=fresh, a new
// connection for each attempt, at OVERLAYD_COST_RATES (default
// 250,500,1000,2000 per second); conn=existing, costInFlight clients
// connected beforehand, a new stream for each, at
// OVERLAYD_COST_RATES_EXISTING (default 2000,4000,8000,16000). For
// each rate it reports the answers (BUSY, errors: timeouts, refused or
// reset connections), their latency, the held sessions' keepalive RTT and
// failures, the daemon's CPU (cores) and whether it still runs. One b.N
// iteration runs every rate: use -benchtime=1x.
//
//	OVERLAYD_COST_OVERLOAD=1 taskset -c 1 go test -run '^$' -bench 'BenchmarkCostOverload' -benchtime=1x -count 2 ./testnet
func BenchmarkCostOverload(b *testing.B) {
	if testing.Short() || os.Getenv("OVERLAYD_COST_OVERLOAD") != "1" {
		b.Skip("set OVERLAYD_COST_OVERLOAD=1 (builds and runs the overlayd binary, about a minute)")
	}
	rates := func(env string, def []int) []int {
		s := os.Getenv(env)
		if s == "" {
			return def
		}
		var rs []int
		for _, f := range strings.Split(s, ",") {
			r, err := strconv.Atoi(f)
			if err != nil || r <= 0 || r > 50000 {
				b.Fatalf("%s=%q: want positive rates per second", env, s)
			}
			rs = append(rs, r)
		}
		return rs
	}
	cpus := "0"
	if others, err := otherCPUs(); err == nil {
		cpus = others
		cpus, _, _ = strings.Cut(others, ",")
	}
	b.Setenv("GOMAXPROCS", "1")
	b.Run("conn=fresh", func(b *testing.B) {
		rs := rates("OVERLAYD_COST_RATES", []int{250, 500, 1000, 2000})
		for range b.N {
			costOverload(b, cpus, rs, true)
		}
	})
	b.Run("conn=existing", func(b *testing.B) {
		rs := rates("OVERLAYD_COST_RATES_EXISTING", []int{2000, 4000, 8000, 16000})
		for range b.N {
			costOverload(b, cpus, rs, false)
		}
	})
}

const (
	costStep     = 5 * time.Second
	costInFlight = 512
)

// costStepResult is one offered rate's outcome.
type costStepResult struct {
	Rate, Sent, NotSent, Busy, Errors int
	LatencyMs                         dist
	KeepaliveMs                       dist
	SessionsLost                      int
	DaemonCores                       float64
	Alive                             bool
}

func costOverload(b *testing.B, cpus string, rates []int, fresh bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cd := costStartDaemon(ctx, b, cpus)
	pool := make(chan *costClient, costInFlight)
	for range costInFlight {
		pool <- newCostClient(ctx, b, false)
	}
	// Wait until the supernode admits, then fill it.
	probe := <-pool
	if err := waitFor(ctx, 15*time.Second, 20*time.Millisecond, func() bool {
		st, s, err := probe.attach(ctx, cd.ai)
		if s != nil {
			s.detach()
		}
		return err == nil && st == pb.AttachResponse_STATUS_ACCEPT
	}); err != nil {
		b.Fatalf("supernode never accepted: %v", err)
	}
	pool <- probe
	if !fresh {
		// Every client connects once; its attempts reuse the connection.
		for range costInFlight {
			c := <-pool
			if err := c.h.Connect(ctx, cd.ai); err != nil {
				b.Fatalf("connect: %v", err)
			}
			pool <- c
		}
	}
	var kaMu sync.Mutex
	var kaRTT []time.Duration
	var lost atomic.Int64
	hctx, stopHold := context.WithCancel(ctx)
	var hwg sync.WaitGroup
	var held []*costSession
	for i := range costCapacity {
		c := newCostClient(ctx, b, false)
		st, s, err := c.attach(ctx, cd.ai)
		if err != nil || st != pb.AttachResponse_STATUS_ACCEPT {
			b.Fatalf("hold %d: answered %v: %v", i, st, err)
		}
		held = append(held, s)
		hwg.Go(func() {
			t := time.NewTicker(500 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-hctx.Done():
					return
				case <-t.C:
				}
				t0 := time.Now()
				// The daemon ends a session after 3 s of silence
				// (keepalive 1 s): a pong later than that is lost.
				if err := s.ping(3 * time.Second); err != nil {
					if hctx.Err() == nil {
						lost.Add(1)
					}
					return
				}
				kaMu.Lock()
				kaRTT = append(kaRTT, time.Since(t0))
				kaMu.Unlock()
			}
		})
	}
	defer func() {
		stopHold()
		hwg.Wait()
		for _, s := range held {
			s.detach()
		}
	}()
	var results []costStepResult
	for _, rate := range rates {
		r := costStepResult{Rate: rate}
		kaMu.Lock()
		kaRTT = kaRTT[:0]
		kaMu.Unlock()
		lost0 := lost.Load()
		c0 := cd.cpu(b)
		t0 := time.Now()
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		tick := time.NewTicker(time.Second / time.Duration(rate))
		// Open loop: at high rates the ticker coalesces, so each tick
		// sends what is due since the step began.
		due := 0
		for now := range tick.C {
			if now.Sub(t0) >= costStep {
				break
			}
			for want := int(now.Sub(t0).Seconds() * float64(rate)); due < want; due++ {
				var c *costClient
				select {
				case c = <-pool:
				default:
					r.NotSent++
					continue
				}
				r.Sent++
				wg.Go(func() {
					defer func() { pool <- c }()
					if fresh {
						_ = c.h.Network().ClosePeer(cd.ai.ID)
					}
					a0 := time.Now()
					st, s, err := c.attach(ctx, cd.ai)
					d := time.Since(a0)
					if s != nil {
						s.detach()
					}
					mu.Lock()
					defer mu.Unlock()
					if err != nil || st != pb.AttachResponse_STATUS_BUSY {
						r.Errors++
						return
					}
					r.Busy++
					lat = append(lat, d)
				})
			}
		}
		tick.Stop()
		wg.Wait()
		wall := time.Since(t0)
		r.DaemonCores = (cd.cpu(b) - c0).Seconds() / wall.Seconds()
		r.LatencyMs = distMs(lat)
		kaMu.Lock()
		r.KeepaliveMs = distMs(slices.Clone(kaRTT))
		kaMu.Unlock()
		r.SessionsLost = int(lost.Load() - lost0)
		select {
		case <-cd.d.exited:
		default:
			r.Alive = true
		}
		results = append(results, r)
		b.Logf("offered %5d/s: sent %5d (not sent %5d), BUSY %5d, errors %5d; answer p50 %7.1f ms p99 %7.1f ms; keepalive RTT p50 %6.1f ms p99 %6.1f ms (%d); sessions lost %d; daemon %.2f cores; alive %v; load %s",
			rate, r.Sent, r.NotSent, r.Busy, r.Errors, r.LatencyMs.P50, r.LatencyMs.P99, r.KeepaliveMs.P50, r.KeepaliveMs.P99, r.KeepaliveMs.N, r.SessionsLost, r.DaemonCores, r.Alive, loadAvg())
		b.ReportMetric(float64(r.Busy)/wall.Seconds(), fmt.Sprintf("busy/s@%d", rate))
		b.ReportMetric(r.LatencyMs.P99, fmt.Sprintf("p99-answer-ms@%d", rate))
		b.ReportMetric(r.KeepaliveMs.P99, fmt.Sprintf("p99-ka-ms@%d", rate))
		b.ReportMetric(r.DaemonCores, fmt.Sprintf("cores@%d", rate))
		if !r.Alive {
			break
		}
	}
	name := map[bool]string{true: "fresh", false: "existing"}[fresh]
	writeReport(b, "cost-overload-runs.jsonl", "cost-overload-"+name+".json", results)
}
