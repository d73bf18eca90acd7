package testnet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/metrics"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/multiformats/go-multiaddr"
)

// Saturation of group messaging (issue 16, point 4): the highest publish
// rate at which every member of a 1,000-member group still gets every
// message, in order, with delivery p99 under 1 s, for the batched and the
// naive group home, with the supernodes in a process of their own.
//
// The benchmark re-executes its own test binary as a child process that
// runs only TestSaturationChild: S whole supernodes (node.Node, as
// msgStartSupernodes starts them for BenchmarkGroupEndToEnd), pinned to
// CPU 0. The members live in the benchmark's process, pinned to CPU 1:
// lightweight members (saturation_member_test.go), one libp2p host each,
// attached round-robin to the supernodes. The child's CPU comes from
// /proc/<pid>/stat over each window, so a delivery's supernode cost is
// measured apart from the members' and the harness's.

const (
	// satChildEnv carries the child's configuration (JSON) and turns
	// TestSaturationChild on.
	satChildEnv = "OVERLAYD_SAT_CHILD"
	// satChildLine prefixes the line on which the child reports its
	// supernodes.
	satChildLine = "SATCHILD "
	satGroup     = "sat"
)

// satChildConfig is what the benchmark tells its child.
type satChildConfig struct {
	Supernodes int           `json:"supernodes"`
	Capacity   int           `json:"capacity"`
	Announce   time.Duration `json:"announce_ns"`
	PerMember  bool          `json:"per_member"`
	// CPU pins the child to this CPU; -1 leaves it unpinned.
	CPU int `json:"cpu"`
}

// satChildInfo is what the child reports: each supernode's address.
type satChildInfo struct {
	Supernodes []satAddr `json:"supernodes"`
	Home       string    `json:"home"`
	Pinned     bool      `json:"pinned"`
}

type satAddr struct {
	ID    string   `json:"id"`
	Addrs []string `json:"addrs"`
}

// TestSaturationChild is the saturation benchmarks' supernode process; it
// is skipped unless satChildEnv is set. It starts the supernodes, prints
// their addresses on one line, and stops them when its stdin ends.
func TestSaturationChild(t *testing.T) {
	cfgJSON := os.Getenv(satChildEnv)
	if cfgJSON == "" {
		t.Skip("the saturation benchmarks' supernode process (" + satChildEnv + " unset)")
	}
	var cfg satChildConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		t.Fatal(err)
	}
	info := satChildInfo{}
	if cfg.CPU >= 0 {
		info.Pinned = satPin([]int{cfg.CPU})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	net := msgStartSupernodes(ctx, t, cfg.Supernodes, cfg.Capacity, cfg.Announce, msgSeed+2000, msgSeed+3000, cfg.PerMember)
	for _, sn := range net.sns {
		a := satAddr{ID: sn.ID().String()}
		for _, ma := range sn.Host().Addrs() {
			a.Addrs = append(a.Addrs, ma.String())
		}
		info.Supernodes = append(info.Supernodes, a)
	}
	info.Home = net.sns[0].Ring().Lookup([]byte(satGroup))
	b, _ := json.Marshal(info)
	fmt.Println(satChildLine + string(b))
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// satChild is a running supernode process.
type satChild struct {
	cmd   *exec.Cmd
	pid   string
	stdin io.WriteCloser
	info  satChildInfo
	sns   []peer.AddrInfo
	done  chan struct{}
}

// satStartChild starts the supernode process and waits for its line.
func satStartChild(ctx context.Context, tb testing.TB, cfg satChildConfig) *satChild {
	tb.Helper()
	cj, _ := json.Marshal(cfg)
	args := []string{"-test.run=^TestSaturationChild$", "-test.count=1", "-test.timeout=30m"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), satChildEnv+"="+string(cj))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start supernode process: %v", err)
	}
	c := &satChild{cmd: cmd, pid: strconv.Itoa(cmd.Process.Pid), stdin: stdin, done: make(chan struct{})}
	tb.Cleanup(c.stop)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		sent := false
		for sc.Scan() {
			if l := sc.Text(); !sent && strings.HasPrefix(l, satChildLine) {
				lines <- strings.TrimPrefix(l, satChildLine)
				sent = true
			}
		}
		close(c.done)
	}()
	select {
	case l := <-lines:
		if err := json.Unmarshal([]byte(l), &c.info); err != nil {
			tb.Fatalf("supernode process: %v", err)
		}
	case <-c.done:
		tb.Fatal("supernode process ended before reporting its supernodes")
	case <-time.After(2 * time.Minute):
		tb.Fatal("supernode process: no supernodes after 2 minutes")
	case <-ctx.Done():
		tb.Fatal(ctx.Err())
	}
	for _, s := range c.info.Supernodes {
		id, err := peer.Decode(s.ID)
		if err != nil {
			tb.Fatal(err)
		}
		ai := peer.AddrInfo{ID: id}
		for _, a := range s.Addrs {
			if ma, err := multiaddr.NewMultiaddr(a); err == nil {
				ai.Addrs = append(ai.Addrs, ma)
			}
		}
		c.sns = append(c.sns, ai)
	}
	return c
}

// stop ends the child: its stdin closes, it stops its supernodes and
// exits; killed after 30 s.
func (c *satChild) stop() {
	c.stdin.Close()
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
	}
	_ = c.cmd.Wait()
}

// satScale sizes a saturation run.
type satScale struct {
	Supernodes int           `json:"supernodes"`
	Members    int           `json:"members"`
	Publishers int           `json:"publishers"`
	Announce   time.Duration `json:"announce_ns"`
	// The sweep: rates from StartRate, doubling until a step fails or
	// MaxRate, then bisecting until hi/lo < 1.1, at most MaxSteps steps
	// of Window publishing each; a step's deliveries may trail its last
	// answer by Drain.
	StartRate float64       `json:"start_rate_per_s"`
	MaxRate   float64       `json:"max_rate_per_s"`
	MaxSteps  int           `json:"max_steps"`
	Window    time.Duration `json:"window_ns"`
	Drain     time.Duration `json:"drain_ns"`
	// P99Limit is the pass criterion on delivery p99.
	P99Limit time.Duration `json:"p99_limit_ns"`
	// Pin puts the supernodes on CPU 0 and the members on CPU 1.
	Pin   bool `json:"pin"`
	Short bool `json:"short"`
}

func satScaleFor(b *testing.B) satScale {
	if testing.Short() {
		return satScale{Supernodes: 2, Members: 20, Publishers: 2, Announce: time.Second, StartRate: 10, MaxRate: 1000, MaxSteps: 2,
			Window: time.Second, Drain: 2 * time.Second, P99Limit: time.Second, Pin: true, Short: true}
	}
	sc := satScale{Supernodes: 10, Members: 1000, Publishers: 4, Announce: 5 * time.Second, StartRate: 10, MaxRate: 1000, MaxSteps: 9,
		Window: 4 * time.Second, Drain: 3 * time.Second, P99Limit: time.Second, Pin: true}
	envInt(b, "OVERLAYD_SAT_SUPERNODES", &sc.Supernodes, 1, 50)
	envInt(b, "OVERLAYD_SAT_MEMBERS", &sc.Members, 2, 1700)
	envInt(b, "OVERLAYD_SAT_STEPS", &sc.MaxSteps, 1, 20)
	envParse(b, "OVERLAYD_SAT_START_RATE", "publishes per second", func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }, 0.5, 1000, &sc.StartRate)
	envDuration(b, "OVERLAYD_SAT_WINDOW", 500*time.Millisecond, time.Minute, &sc.Window)
	envDuration(b, "OVERLAYD_MSG_ANNOUNCE", 500*time.Millisecond, 30*time.Second, &sc.Announce)
	sc.Pin = os.Getenv("OVERLAYD_SAT_NOPIN") == ""
	return sc
}

// satRun is one design's network: the supernode process and the members.
type satRun struct {
	sc         satScale
	design     string
	child      *satChild
	members    []*satMember
	publishers []*satMember
	t0         time.Time
	step       uint64
	bwc        *metrics.BandwidthCounter
	pinned     bool
	StartS     float64
}

// satStart starts the supernode process of a design, the members, attaches
// them round-robin and joins them to the group, and waits until the group's
// home lists every member.
func satStart(ctx context.Context, b *testing.B, sc satScale, design string) *satRun {
	b.Helper()
	t := time.Now()
	cpu := -1
	if sc.Pin {
		cpu = 0
	}
	r := &satRun{sc: sc, design: design, t0: time.Now(), bwc: metrics.NewBandwidthCounter()}
	r.child = satStartChild(ctx, b, satChildConfig{Supernodes: sc.Supernodes, Capacity: max(200, 2*sc.Members/sc.Supernodes),
		Announce: sc.Announce, PerMember: design == "naive", CPU: cpu})
	if sc.Pin {
		r.pinned = satPin([]int{1}) && r.child.info.Pinned
	}
	r.members = make([]*satMember, sc.Members)
	b.Cleanup(func() {
		for _, m := range r.members {
			if m != nil {
				m.close()
			}
		}
	})
	err := satParallel(ctx, sc.Members, 32, func(i int) error {
		m, err := satNewMember(i, r.bwc)
		if err != nil {
			return err
		}
		r.members[i] = m
		return m.attach(ctx, r.child.sns[i%len(r.child.sns)], r.t0)
	})
	if err != nil {
		b.Fatalf("design=%s: members: %v", design, err)
	}
	r.join(ctx, b, r.members)
	for i := range sc.Publishers {
		r.publishers = append(r.publishers, r.members[i*sc.Members/sc.Publishers])
	}
	r.StartS = time.Since(t).Seconds()
	b.Logf("design=%s: %d supernodes (own process, pid %s, pinned %v) and %d members attached and joined in %.1f s",
		design, sc.Supernodes, r.child.pid, r.pinned, sc.Members, r.StartS)
	return r
}

// join joins ms to the group and waits until the home lists every member.
func (r *satRun) join(ctx context.Context, b *testing.B, ms []*satMember) {
	b.Helper()
	for _, m := range ms {
		if err := m.join(satGroup); err != nil {
			b.Fatalf("member %d: join: %v", m.i, err)
		}
	}
	var last int
	err := waitFor(ctx, 90*time.Second, 250*time.Millisecond, func() bool {
		n, err := r.members[0].countMembers(ctx, satGroup)
		last = n
		return err == nil && n == len(r.members)
	})
	if err != nil {
		b.Fatalf("design=%s: the group's home lists %d of %d members: %v", r.design, last, len(r.members), err)
	}
}

// heal re-attaches the members whose session ended (after an overloaded
// step) and re-joins them; it returns how many.
func (r *satRun) heal(ctx context.Context, b *testing.B) int {
	b.Helper()
	var dead []*satMember
	for _, m := range r.members {
		if m.ended.Load() {
			dead = append(dead, m)
		}
	}
	if len(dead) == 0 {
		return 0
	}
	err := satParallel(ctx, len(dead), 32, func(i int) error {
		return dead[i].attach(ctx, dead[i].sn, r.t0)
	})
	if err != nil {
		b.Fatalf("design=%s: re-attach: %v", r.design, err)
	}
	r.join(ctx, b, dead)
	return len(dead)
}

// satParallel runs f(0..n-1), at most par at once, and returns the first
// error.
func satParallel(ctx context.Context, n, par int, f func(int) error) error {
	var wg sync.WaitGroup
	sem := make(chan struct{}, par)
	var mu sync.Mutex
	var first error
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// satStep is one step of the sweep: publishing at Rate for the window.
type satStep struct {
	Rate          float64 `json:"rate_per_s"`
	Scheduled     int     `json:"scheduled"`
	Answered      int     `json:"answered"`
	PublishErrors int     `json:"publish_errors"`
	FirstError    string  `json:"first_error,omitempty"`
	// Numbered publishes: answered, or received by some member.
	Numbered      int     `json:"numbered"`
	Expected      int     `json:"expected_deliveries"`
	Delivered     int     `json:"delivered"`
	Missing       int     `json:"missing"`
	Duplicates    int64   `json:"duplicates"`
	OutOfOrder    int64   `json:"out_of_order"`
	Gaps          uint64  `json:"gap_dropped"`
	SessionsEnded int     `json:"sessions_ended"`
	FirstEnd      string  `json:"first_session_end,omitempty"`
	DeliveryMs    dist    `json:"delivery_ms"`
	PublishMs     dist    `json:"publish_answer_ms"`
	WallS         float64 `json:"wall_s"`
	// CPU seconds in the step (first publish to the last delivery or the
	// drain deadline): the supernode process and this one (members and
	// harness).
	SupernodeCPUS  float64 `json:"supernode_cpu_s"`
	MemberCPUS     float64 `json:"member_process_cpu_s"`
	SupernodeCores float64 `json:"supernode_cores"`
	MemberCores    float64 `json:"member_process_cores"`
	// DeliveriesPerS is deliveries over the step's wall time;
	// PerSupernodeCore deliveries per CPU second of the supernode process.
	DeliveriesPerS   float64 `json:"deliveries_per_s"`
	PerSupernodeCore float64 `json:"deliveries_per_supernode_cpu_s"`
	// Bytes: written by the supernode process's and this process's system
	// calls (/proc/<pid>/io wchar), and the members' libp2p bandwidth
	// counters (stream payload, out and in).
	SupernodeWriteBytes uint64  `json:"supernode_write_bytes"`
	MemberWriteBytes    uint64  `json:"member_process_write_bytes"`
	MemberStreamOut     int64   `json:"member_stream_bytes_out"`
	MemberStreamIn      int64   `json:"member_stream_bytes_in"`
	MachineBusyCores    float64 `json:"machine_busy_cores"`
	LoadAvg             string  `json:"loadavg"`
	Pass                bool    `json:"pass"`
	Why                 string  `json:"why,omitempty"`
	// HarnessBound is set when the member process used over 90% of its
	// core: the step may have measured the members, not the supernodes.
	HarnessBound bool `json:"harness_bound"`
}

// runStep publishes at rate for the window and checks every member.
func (r *satRun) runStep(ctx context.Context, b *testing.B, rate float64) satStep {
	b.Helper()
	sc := r.sc
	st := satStep{Rate: rate}
	type base struct {
		ooo, dup int64
		gaps     uint64
	}
	bases := make([]base, len(r.members))
	for i, m := range r.members {
		m.take()
		bases[i] = base{m.outOfOrder.Load(), m.dups.Load(), m.gaps.Load()}
	}
	r.step++
	stepBase := r.step << 32
	total := max(1, int(math.Round(rate*sc.Window.Seconds())))
	st.Scheduled = total
	type pubRes struct {
		err  error
		took time.Duration
	}
	res := make([]pubRes, total)
	interval := time.Duration(float64(time.Second) / rate)

	c0, _ := satProcCPU(r.child.pid)
	p0 := processCPU()
	_, cw0, _ := satProcIO(r.child.pid)
	_, pw0, _ := satProcIO("self")
	bw0 := r.bwc.GetBandwidthTotals()
	ms0 := readMachineStat()
	tp := time.Now()
	var pwg sync.WaitGroup
	for i := range total {
		if d := time.Until(tp.Add(time.Duration(i) * interval)); d > 0 {
			pause(ctx, d)
		}
		if ctx.Err() != nil {
			break
		}
		pub := r.publishers[i%len(r.publishers)]
		pwg.Go(func() {
			s := time.Now()
			_, err := pub.publish(ctx, satGroup, satPayload(s.Sub(r.t0), stepBase|uint64(i)), 5*time.Second)
			res[i] = pubRes{err, time.Since(s)}
		})
	}
	pwg.Wait()
	var took []time.Duration
	for _, p := range res {
		if p.err != nil {
			st.PublishErrors++
			if st.FirstError == "" {
				st.FirstError = p.err.Error()
			}
			continue
		}
		st.Answered++
		took = append(took, p.took)
	}
	st.PublishMs = distMs(took)
	// Drain: until every member has a delivery per answered publish.
	_ = waitFor(ctx, sc.Drain, 10*time.Millisecond, func() bool {
		for _, m := range r.members {
			m.mu.Lock()
			n := len(m.got)
			m.mu.Unlock()
			if n < st.Answered {
				return false
			}
		}
		return true
	})
	wall := time.Since(tp)
	c1, _ := satProcCPU(r.child.pid)
	p1 := processCPU()
	_, cw1, _ := satProcIO(r.child.pid)
	_, pw1, _ := satProcIO("self")
	bw1 := r.bwc.GetBandwidthTotals()
	ms1 := readMachineStat()
	st.WallS = wall.Seconds()
	st.SupernodeCPUS = (c1 - c0).Seconds()
	st.MemberCPUS = (p1 - p0).Seconds()
	st.SupernodeCores = st.SupernodeCPUS / st.WallS
	st.MemberCores = st.MemberCPUS / st.WallS
	st.SupernodeWriteBytes, st.MemberWriteBytes = cw1-cw0, pw1-pw0
	st.MemberStreamOut, st.MemberStreamIn = bw1.TotalOut-bw0.TotalOut, bw1.TotalIn-bw0.TotalIn
	if ms0.ok && ms1.ok {
		st.MachineBusyCores = float64(ms1.busy-ms0.busy) / userHZ / st.WallS
	}
	st.LoadAvg = loadAvg()
	st.HarnessBound = r.pinned && st.MemberCores > 0.9

	// Check: the numbered publishes are the answered ones and any a member
	// received; every member must hold each once, in order.
	numbered := map[uint64]bool{}
	for i, p := range res {
		if p.err == nil {
			numbered[stepBase|uint64(i)] = true
		}
	}
	gots := make([][]satDelivery, len(r.members))
	for i, m := range r.members {
		gots[i] = m.take()
		for _, d := range gots[i] {
			if d.idx>>32 == r.step {
				numbered[d.idx] = true
			}
		}
	}
	st.Numbered = len(numbered)
	st.Expected = st.Numbered * len(r.members)
	var lats []time.Duration
	for i, m := range r.members {
		seen := map[uint64]bool{}
		for _, d := range gots[i] {
			if d.idx>>32 != r.step {
				continue
			}
			if seen[d.idx] {
				st.Duplicates++
				continue
			}
			seen[d.idx] = true
			st.Delivered++
			lats = append(lats, d.lat)
		}
		st.OutOfOrder += m.outOfOrder.Load() - bases[i].ooo
		st.Duplicates += m.dups.Load() - bases[i].dup
		st.Gaps += m.gaps.Load() - bases[i].gaps
		if m.ended.Load() {
			st.SessionsEnded++
			if st.FirstEnd == "" {
				st.FirstEnd, _ = m.endErr.Load().(string)
			}
		}
	}
	st.Missing = st.Expected - st.Delivered
	st.DeliveryMs = distMs(lats)
	st.DeliveriesPerS = float64(st.Delivered) / st.WallS
	if st.SupernodeCPUS > 0 {
		st.PerSupernodeCore = float64(st.Delivered) / st.SupernodeCPUS
	}
	var why []string
	if st.PublishErrors > 0 {
		why = append(why, fmt.Sprintf("%d of %d publishes failed (%s)", st.PublishErrors, total, st.FirstError))
	}
	if st.Missing > 0 {
		why = append(why, fmt.Sprintf("loss: %d of %d deliveries missing after a %v drain", st.Missing, st.Expected, sc.Drain))
	}
	if st.OutOfOrder > 0 || st.Duplicates > 0 {
		why = append(why, fmt.Sprintf("order: %d out of order, %d duplicates", st.OutOfOrder, st.Duplicates))
	}
	if st.Gaps > 0 {
		why = append(why, fmt.Sprintf("gaps: %d frames dropped at full session queues", st.Gaps))
	}
	if st.SessionsEnded > 0 {
		why = append(why, fmt.Sprintf("%d sessions ended (%s)", st.SessionsEnded, st.FirstEnd))
	}
	if st.DeliveryMs.P99 >= ms(sc.P99Limit) {
		why = append(why, fmt.Sprintf("p99 %.0f ms ≥ %.0f ms", st.DeliveryMs.P99, ms(sc.P99Limit)))
	}
	st.Pass = len(why) == 0 && st.Numbered > 0
	st.Why = strings.Join(why, "; ")
	b.Logf("design=%s step %d: %.1f publishes/s: %d/%d answered, %d numbered, delivered %d of %d, p50 %.1f p99 %.1f max %.1f ms; supernodes %.2f cores (%.0f deliveries per supernode CPU s), members %.2f cores; machine %.2f cores busy, load %s: pass=%v %s",
		r.design, r.step, rate, st.Answered, total, st.Numbered, st.Delivered, st.Expected, st.DeliveryMs.P50, st.DeliveryMs.P99, st.DeliveryMs.Max,
		st.SupernodeCores, st.PerSupernodeCore, st.MemberCores, st.MachineBusyCores, st.LoadAvg, st.Pass, st.Why)
	return st
}

// satReport is one design's sweep.
type satReport struct {
	Design string    `json:"design"`
	Scale  satScale  `json:"scale"`
	Pinned bool      `json:"pinned"`
	StartS float64   `json:"start_s"`
	Steps  []satStep `json:"steps"`
	// Best is the highest passing step (nil if none passed); FirstFail
	// the lowest failing one (nil if none failed).
	Best      *satStep `json:"best,omitempty"`
	FirstFail *satStep `json:"first_fail,omitempty"`
	Healed    int      `json:"members_reattached"`
}

// BenchmarkGroupSaturation sweeps the publish rate of one group for each
// design of the group home (batched: the node's default; naive:
// node.WithPerMemberGroupFanoutForTest) and reports the highest rate at
// which every member still got every message, in order, with delivery p99
// under 1 s, in deliveries per second per supernode core. Full scale: 10
// supernodes in a child process pinned to CPU 0, 1,000 lightweight members
// in this process pinned to CPU 1 (see saturation_member_test.go for what
// they are), a 128-byte payload from 4 publishers, steps of 4 s from 10
// publishes/s, doubling then bisecting, at most 9 steps. Under -short: 2
// supernodes, 20 members, 2 steps of 1 s. OVERLAYD_SAT_SUPERNODES,
// OVERLAYD_SAT_MEMBERS, OVERLAYD_SAT_STEPS, OVERLAYD_SAT_START_RATE,
// OVERLAYD_SAT_WINDOW, OVERLAYD_MSG_ANNOUNCE (5 s) and OVERLAYD_SAT_NOPIN
// change it. With OVERLAYD_REPORT_DIR set, each design writes
// sat-<design>.json and appends to sat-runs.jsonl.
func BenchmarkGroupSaturation(b *testing.B) {
	sc := satScaleFor(b)
	defer satPin(nil)
	for _, design := range []string{"batched", "naive"} {
		b.Run("design="+design, func(b *testing.B) {
			var rep *satReport
			for range b.N {
				rep = satSweep(b, sc, design)
			}
			if rep.Best != nil {
				b.ReportMetric(rep.Best.Rate, "max-publishes/s")
				b.ReportMetric(rep.Best.PerSupernodeCore, "deliveries/sn-core-s")
				b.ReportMetric(rep.Best.DeliveriesPerS, "deliveries/s")
				b.ReportMetric(rep.Best.DeliveryMs.P50, "p50-ms")
				b.ReportMetric(rep.Best.DeliveryMs.P99, "p99-ms")
			}
			if rep.FirstFail != nil {
				b.ReportMetric(rep.FirstFail.Rate, "fail-publishes/s")
			}
		})
	}
}

func satSweep(b *testing.B, sc satScale, design string) *satReport {
	b.Helper()
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	r := satStart(ctx, b, sc, design)
	defer r.child.stop()
	defer satPin(nil)
	rep := &satReport{Design: design, Scale: sc, Pinned: r.pinned, StartS: r.StartS}
	lo, hi := 0.0, math.Inf(1)
	rate := sc.StartRate
	b.StartTimer()
	for range sc.MaxSteps {
		if ctx.Err() != nil {
			break
		}
		st := r.runStep(ctx, b, rate)
		rep.Steps = append(rep.Steps, st)
		k := &rep.Steps[len(rep.Steps)-1]
		if st.Pass {
			lo = rate
			if rep.Best == nil || rep.Best.Rate < rate {
				rep.Best = k
			}
		} else {
			hi = rate
			if rep.FirstFail == nil || rep.FirstFail.Rate > rate {
				rep.FirstFail = k
			}
		}
		switch {
		case math.IsInf(hi, 1) && rate >= sc.MaxRate:
			rate = 0
		case math.IsInf(hi, 1):
			rate = min(2*rate, sc.MaxRate)
		case lo == 0:
			rate = hi / 2
		case hi/lo < 1.1:
			rate = 0
		default:
			rate = math.Round((lo+hi)/2*10) / 10
		}
		if rate == 0 {
			break
		}
		// Let an overloaded step's queues drain, and repair what it broke.
		pause(ctx, min(2*time.Second, sc.Drain))
		rep.Healed += r.heal(ctx, b)
	}
	b.StopTimer()
	writeReport(b, "sat-runs.jsonl", "sat-"+design+".json", rep)
	if rep.Best != nil {
		b.Logf("design=%s: highest passing rate %.1f publishes/s: %.0f deliveries/s, %.0f deliveries per supernode CPU second (supernodes %.2f cores), p50 %.1f p99 %.1f ms",
			design, rep.Best.Rate, rep.Best.DeliveriesPerS, rep.Best.PerSupernodeCore, rep.Best.SupernodeCores, rep.Best.DeliveryMs.P50, rep.Best.DeliveryMs.P99)
	} else {
		b.Logf("design=%s: no step passed", design)
	}
	if rep.FirstFail != nil {
		b.Logf("design=%s: lowest failing rate %.1f publishes/s: %s", design, rep.FirstFail.Rate, rep.FirstFail.Why)
	}
	return rep
}
