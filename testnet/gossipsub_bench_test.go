package testnet

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/metrics"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
)

// The same group carried by go-libp2p-pubsub's GossipSub (issue 16,
// point 5): 1,000 members subscribed to one topic, the same publish rate
// and 128-byte payload as overlayd's batched group, in the same go test
// run. GossipSub has no supernodes: every member is a libp2p host (TCP,
// TLS/Noise, yamux, on 127.0.0.1) in this process, and after creating its
// router, joining the topic and subscribing, each member dials gsDial
// other members drawn at random (what an application with a peer
// discovery service would do), so each has about 2 × gsDial connections.
// Publishing starts only once every member is reachable from every other
// over connections, every member has grafted at least one mesh peer, and
// one warm-up message has reached all members.

// gsDial is how many random members each member dials.
const gsDial = 5

// gsScale sizes the comparison.
type gsScale struct {
	Members    int           `json:"members"`
	Supernodes int           `json:"overlayd_supernodes"`
	Publishers int           `json:"publishers"`
	Rate       float64       `json:"rate_per_s"`
	Window     time.Duration `json:"window_ns"`
	Drain      time.Duration `json:"drain_ns"`
	Dial       int           `json:"dials_per_member"`
	Baseline   time.Duration `json:"baseline_ns"`
	Short      bool          `json:"short"`
}

func gsScaleFor(b *testing.B) gsScale {
	if testing.Short() {
		return gsScale{Members: 20, Supernodes: 2, Publishers: 2, Rate: 10, Window: time.Second, Drain: 3 * time.Second, Dial: 3, Baseline: 500 * time.Millisecond, Short: true}
	}
	sc := gsScale{Members: 1000, Supernodes: 10, Publishers: 4, Rate: 10, Window: 5 * time.Second, Drain: 5 * time.Second, Dial: gsDial, Baseline: 3 * time.Second}
	envInt(b, "OVERLAYD_CMP_MEMBERS", &sc.Members, 10, 1700)
	envParse(b, "OVERLAYD_CMP_RATE", "publishes per second", func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }, 0.5, 1000, &sc.Rate)
	envDuration(b, "OVERLAYD_CMP_WINDOW", 500*time.Millisecond, time.Minute, &sc.Window)
	return sc
}

// gsReport is one design's figures at the comparison's rate.
type gsReport struct {
	Design string  `json:"design"`
	Scale  gsScale `json:"scale"`
	// Params are GossipSub's mesh parameters (empty for overlayd).
	Params    string  `json:"params,omitempty"`
	CPUs      string  `json:"cpus"`
	SetupS    float64 `json:"setup_s"`
	Scheduled int     `json:"scheduled"`
	Published int     `json:"published"`
	Expected  int     `json:"expected_deliveries"`
	Delivered int     `json:"delivered"`
	Ratio     float64 `json:"delivered_ratio"`
	// DuplicatesPerDelivery: copies of a message a member received after
	// the first (GossipSub's tracer DuplicateMessage; overlayd: the
	// members' duplicate group messages), per delivered message.
	DuplicatesPerDelivery float64 `json:"duplicates_per_delivery"`
	DeliveryMs            dist    `json:"delivery_ms"`
	WallS                 float64 `json:"wall_s"`
	// CPU per delivered message, µs: every process involved (GossipSub:
	// this one; overlayd: the supernode process plus this one, members and
	// harness), and for overlayd the supernodes alone.
	CPUUsPerDelivery          float64 `json:"cpu_us_per_delivery"`
	SupernodeCPUUsPerDelivery float64 `json:"supernode_cpu_us_per_delivery,omitempty"`
	CPUCores                  float64 `json:"cpu_cores"`
	// Idle: the same processes' CPU and socket writes over Baseline
	// before publishing (keepalives, announcements, membership refresh;
	// GossipSub's heartbeats and gossip), and the per-delivery figures
	// net of that idle rate over the window.
	Baseline                     time.Duration `json:"baseline_ns"`
	IdleCores                    float64       `json:"idle_cores"`
	IdleWireBytesPerS            float64       `json:"idle_wire_bytes_per_s"`
	NetCPUUsPerDelivery          float64       `json:"net_cpu_us_per_delivery"`
	NetSupernodeCPUUsPerDelivery float64       `json:"net_supernode_cpu_us_per_delivery,omitempty"`
	NetWireBytesPerDelivery      float64       `json:"net_wire_bytes_per_delivery"`
	// Bytes per delivered message: written to sockets by every process
	// involved (/proc/<pid>/io wchar: TLS records and yamux included), and
	// libp2p stream payload sent by the hosts that have a
	// BandwidthCounter (GossipSub: all; overlayd: the members only, the
	// supernodes' hosts being built inside node.Node).
	WireBytesPerDelivery   float64 `json:"wire_bytes_per_delivery"`
	StreamBytesPerDelivery float64 `json:"stream_bytes_per_delivery"`
	// GossipSub's own counts in the window.
	RPCsReceived  int64   `json:"rpcs_received,omitempty"`
	RPCsDropped   int64   `json:"rpcs_dropped,omitempty"`
	Rejected      int64   `json:"rejected,omitempty"`
	Undeliverable int64   `json:"undeliverable,omitempty"`
	MeshMin       int64   `json:"mesh_min,omitempty"`
	MeshMean      float64 `json:"mesh_mean,omitempty"`
	MachineBusy   float64 `json:"machine_busy_cores"`
	LoadAvg       string  `json:"loadavg"`
}

// BenchmarkGroupVsGossipSub carries one 1,000-member group at one publish
// rate (10/s, 128-byte payload, 4 publishers, 5 s) three ways, in the same
// go test run:
//
//	design=overlayd-batched       10 supernodes in a child process pinned
//	                              to CPU 0 (as BenchmarkGroupSaturation),
//	                              the lightweight members on CPU 1
//	design=gossipsub-default      one GossipSub topic, pubsub.NewGossipSub
//	                              with its defaults, all in this process,
//	                              unpinned (both cores)
//	design=gossipsub-recommended  the same with D=8, Dlo=6, Dhi=12,
//	                              heartbeat 700 ms and flood publishing
//
// and reports bytes and CPU per delivered message, delivery p50/p99,
// delivery ratio and duplicates per delivered message. Under -short: 20
// members, 2 supernodes, 1 s. OVERLAYD_CMP_MEMBERS, OVERLAYD_CMP_RATE and
// OVERLAYD_CMP_WINDOW change it. Reports: cmp-<design>.json and
// cmp-runs.jsonl in OVERLAYD_REPORT_DIR.
func BenchmarkGroupVsGossipSub(b *testing.B) {
	sc := gsScaleFor(b)
	defer satPin(nil)
	for _, design := range []string{"overlayd-batched", "gossipsub-default", "gossipsub-recommended"} {
		b.Run("design="+design, func(b *testing.B) {
			var r *gsReport
			for range b.N {
				if design == "overlayd-batched" {
					r = gsRunOverlayd(b, sc)
				} else {
					r = gsRunGossipSub(b, sc, design == "gossipsub-recommended")
				}
			}
			writeReport(b, "cmp-runs.jsonl", "cmp-"+design+".json", r)
			b.Logf("design=%s (%s; %s): %d of %d published, delivered %d of %d (%.3f%%), p50 %.1f p99 %.1f max %.1f ms; %.2f duplicates per delivery; %.1f µs CPU per delivery (supernodes %.1f), %.2f cores; %.0f socket bytes and %.0f stream bytes per delivery; idle %.2f cores and %.0f socket bytes/s over %v, net of idle %.1f µs CPU (supernodes %.1f) and %.0f socket bytes per delivery; RPCs received %d, dropped %d, rejected %d, undeliverable %d; mesh min %d mean %.1f; machine %.2f cores busy, load %s",
				design, r.Params, r.CPUs, r.Published, r.Scheduled, r.Delivered, r.Expected, 100*r.Ratio, r.DeliveryMs.P50, r.DeliveryMs.P99, r.DeliveryMs.Max,
				r.DuplicatesPerDelivery, r.CPUUsPerDelivery, r.SupernodeCPUUsPerDelivery, r.CPUCores, r.WireBytesPerDelivery, r.StreamBytesPerDelivery,
				r.IdleCores, r.IdleWireBytesPerS, r.Baseline, r.NetCPUUsPerDelivery, r.NetSupernodeCPUUsPerDelivery, r.NetWireBytesPerDelivery,
				r.RPCsReceived, r.RPCsDropped, r.Rejected, r.Undeliverable, r.MeshMin, r.MeshMean, r.MachineBusy, r.LoadAvg)
			b.ReportMetric(100*r.Ratio, "delivered-%")
			b.ReportMetric(r.DeliveryMs.P50, "p50-ms")
			b.ReportMetric(r.DeliveryMs.P99, "p99-ms")
			b.ReportMetric(r.CPUUsPerDelivery, "cpu-µs/delivery")
			b.ReportMetric(r.NetCPUUsPerDelivery, "net-cpu-µs/delivery")
			b.ReportMetric(r.WireBytesPerDelivery, "wire-B/delivery")
			b.ReportMetric(r.DuplicatesPerDelivery, "dups/delivery")
		})
	}
}

// gsRunOverlayd runs one step of overlayd's batched group at the rate.
func gsRunOverlayd(b *testing.B, sc gsScale) *gsReport {
	b.Helper()
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ss := satScale{Supernodes: sc.Supernodes, Members: sc.Members, Publishers: sc.Publishers, Announce: 5 * time.Second,
		Window: sc.Window, Drain: sc.Drain, P99Limit: time.Second, Pin: true, Short: sc.Short}
	if sc.Short {
		ss.Announce = time.Second
	}
	t := time.Now()
	run := satStart(ctx, b, ss, "batched")
	defer run.child.stop()
	defer satPin(nil)
	r := &gsReport{Design: "overlayd-batched", Scale: sc, CPUs: "supernodes on CPU 0, members on CPU 1", SetupS: time.Since(t).Seconds()}
	if !run.pinned {
		r.CPUs = "unpinned"
	}
	pause(ctx, time.Second)
	c0, _ := satProcCPU(run.child.pid)
	p0 := processCPU()
	_, cw0, _ := satProcIO(run.child.pid)
	_, pw0, _ := satProcIO("self")
	tb := time.Now()
	pause(ctx, sc.Baseline)
	idleS := time.Since(tb).Seconds()
	c1, _ := satProcCPU(run.child.pid)
	p1 := processCPU()
	_, cw1, _ := satProcIO(run.child.pid)
	_, pw1, _ := satProcIO("self")
	idleSN := (c1 - c0).Seconds() / idleS
	r.Baseline = sc.Baseline
	r.IdleCores = idleSN + (p1-p0).Seconds()/idleS
	r.IdleWireBytesPerS = float64(cw1-cw0+pw1-pw0) / idleS
	b.StartTimer()
	st := run.runStep(ctx, b, sc.Rate)
	b.StopTimer()
	r.Scheduled, r.Published, r.Expected, r.Delivered = st.Scheduled, st.Answered, st.Expected, st.Delivered
	r.Ratio = ratio(float64(st.Delivered), float64(st.Expected))
	d := float64(max(st.Delivered, 1))
	r.DuplicatesPerDelivery = float64(st.Duplicates) / d
	r.DeliveryMs = st.DeliveryMs
	r.WallS = st.WallS
	r.CPUUsPerDelivery = 1e6 * (st.SupernodeCPUS + st.MemberCPUS) / d
	r.SupernodeCPUUsPerDelivery = 1e6 * st.SupernodeCPUS / d
	r.CPUCores = st.SupernodeCores + st.MemberCores
	r.WireBytesPerDelivery = float64(st.SupernodeWriteBytes+st.MemberWriteBytes) / d
	// Stream payload: what the members sent, and what they received (the
	// supernodes' sends to them); the supernodes' traffic to each other is
	// missing here but is in the wire figure.
	r.StreamBytesPerDelivery = float64(st.MemberStreamOut+st.MemberStreamIn) / d
	r.MachineBusy, r.LoadAvg = st.MachineBusyCores, st.LoadAvg
	r.NetCPUUsPerDelivery = 1e6 * (st.SupernodeCPUS + st.MemberCPUS - r.IdleCores*st.WallS) / d
	r.NetSupernodeCPUUsPerDelivery = 1e6 * (st.SupernodeCPUS - idleSN*st.WallS) / d
	r.NetWireBytesPerDelivery = (float64(st.SupernodeWriteBytes+st.MemberWriteBytes) - r.IdleWireBytesPerS*st.WallS) / d
	return r
}

// gsTracer counts one router's events; the shared counters sum them.
type gsTracer struct {
	c    *gsCounts
	mesh atomic.Int64
}

type gsCounts struct {
	recvRPC, dropRPC, dup, reject, undeliverable atomic.Int64
}

func (t *gsTracer) AddPeer(peer.ID, protocol.ID)                         {}
func (t *gsTracer) RemovePeer(peer.ID)                                   {}
func (t *gsTracer) OnNewOutboundStream(peer.ID, protocol.ID)             {}
func (t *gsTracer) OnClosedOutboundStream(peer.ID)                       {}
func (t *gsTracer) Join(string)                                          {}
func (t *gsTracer) Leave(string)                                         {}
func (t *gsTracer) Graft(peer.ID, string)                                { t.mesh.Add(1) }
func (t *gsTracer) Prune(peer.ID, string)                                { t.mesh.Add(-1) }
func (t *gsTracer) ValidateMessage(*pubsub.Message)                      {}
func (t *gsTracer) DeliverMessage(*pubsub.Message)                       {}
func (t *gsTracer) RejectMessage(*pubsub.Message, string)                { t.c.reject.Add(1) }
func (t *gsTracer) DuplicateMessage(*pubsub.Message)                     { t.c.dup.Add(1) }
func (t *gsTracer) ThrottlePeer(peer.ID)                                 {}
func (t *gsTracer) RecvRPC(*pubsub.RPC)                                  { t.c.recvRPC.Add(1) }
func (t *gsTracer) SendRPC(*pubsub.RPC, peer.ID)                         {}
func (t *gsTracer) SendRPCCompleted(*pubsub.RPC, peer.ID, time.Duration) {}
func (t *gsTracer) DropRPC(*pubsub.RPC, peer.ID)                         { t.c.dropRPC.Add(1) }
func (t *gsTracer) UndeliverableMessage(*pubsub.Message)                 { t.c.undeliverable.Add(1) }

// gsMember is one GossipSub member.
type gsMember struct {
	h     host.Host
	ps    *pubsub.PubSub
	topic *pubsub.Topic
	sub   *pubsub.Subscription
	tr    *gsTracer
	mu    sync.Mutex
	got   []satDelivery
}

// gsParams returns the options of the "recommended" configuration and
// their description.
//
// go-libp2p-pubsub's documentation gives no table by network size: its
// defaults (D=6, Dlo=5, Dhi=12, Dlazy=6, heartbeat 1 s, flood publishing
// off in v0.19.0) are documented as general-purpose defaults
// (gossipsub.go, GossipSubParams). The gossipsub v1.1 specification
// recommends flood publishing for a peer's own messages (section "Flood
// Publishing"), and the degree guidance used by large deployments sets D
// near ln(N) plus a margin (about 7 at N = 1,000): Ethereum's consensus
// network runs D=8, Dlo=6, Dhi=12, Dlazy=6 with a 700 ms heartbeat. These
// are the values used here.
func gsParams(recommended bool) ([]pubsub.Option, string) {
	if !recommended {
		p := pubsub.DefaultGossipSubParams()
		return nil, fmt.Sprintf("defaults: D=%d Dlo=%d Dhi=%d Dlazy=%d heartbeat %v, flood publish off", p.D, p.Dlo, p.Dhi, p.Dlazy, p.HeartbeatInterval)
	}
	p := pubsub.DefaultGossipSubParams()
	p.D, p.Dlo, p.Dhi, p.Dlazy = 8, 6, 12, 6
	p.HeartbeatInterval = 700 * time.Millisecond
	return []pubsub.Option{pubsub.WithGossipSubParams(p), pubsub.WithFloodPublish(true)},
		fmt.Sprintf("recommended: D=%d Dlo=%d Dhi=%d Dlazy=%d heartbeat %v, flood publish on", p.D, p.Dlo, p.Dhi, p.Dlazy, p.HeartbeatInterval)
}

// gsRunGossipSub builds the GossipSub network and publishes at the rate.
func gsRunGossipSub(b *testing.B, sc gsScale, recommended bool) *gsReport {
	b.Helper()
	b.StopTimer()
	satPin(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	design := "gossipsub-default"
	if recommended {
		design = "gossipsub-recommended"
	}
	opts, desc := gsParams(recommended)
	r := &gsReport{Design: design, Scale: sc, Params: desc, CPUs: "one process, both CPUs"}
	t := time.Now()
	t0 := time.Now()
	counts := &gsCounts{}
	bwc := metrics.NewBandwidthCounter()
	ms := make([]*gsMember, sc.Members)
	defer func() {
		for _, m := range ms {
			if m != nil {
				m.h.Close()
			}
		}
	}()
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	var rwg sync.WaitGroup
	defer rwg.Wait()
	defer rcancel()
	// Router, topic and subscription first, then the connections
	// (LIBP2P-NOTES: a router created after connecting misses peers).
	err := satParallel(ctx, sc.Members, 32, func(i int) error {
		k, _, err := msgKey()
		if err != nil {
			return err
		}
		h, err := libp2p.New(libp2p.Identity(k), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.Transport(tcp.NewTCPTransport),
			libp2p.ResourceManager(&network.NullResourceManager{}), libp2p.BandwidthReporter(bwc), libp2p.DisableRelay(), libp2p.DisableMetrics())
		if err != nil {
			return err
		}
		m := &gsMember{h: h, tr: &gsTracer{c: counts}}
		ms[i] = m
		m.ps, err = pubsub.NewGossipSub(rctx, h, append([]pubsub.Option{pubsub.WithRawTracer(m.tr)}, opts...)...)
		if err == nil {
			m.topic, err = m.ps.Join(satGroup)
		}
		if err == nil {
			m.sub, err = m.topic.Subscribe(pubsub.WithBufferSize(1024))
		}
		if err != nil {
			return err
		}
		rwg.Go(func() {
			for {
				msg, err := m.sub.Next(rctx)
				if err != nil {
					return
				}
				sent, idx, ok := msgParsePayload(msg.Data)
				if !ok {
					continue
				}
				now := time.Since(t0)
				m.mu.Lock()
				m.got = append(m.got, satDelivery{idx: idx, lat: now - sent})
				m.mu.Unlock()
			}
		})
		return nil
	})
	if err != nil {
		b.Fatalf("%s: members: %v", design, err)
	}
	rng := rand.New(rand.NewPCG(msgSeed, 5))
	dials := make([][]int, sc.Members)
	for i := range dials {
		for _, j := range rng.Perm(sc.Members)[:min(sc.Dial+1, sc.Members)] {
			if j != i && len(dials[i]) < sc.Dial {
				dials[i] = append(dials[i], j)
			}
		}
	}
	err = satParallel(ctx, sc.Members, 32, func(i int) error {
		for _, j := range dials[i] {
			if err := ms[i].h.Connect(ctx, peer.AddrInfo{ID: ms[j].h.ID(), Addrs: ms[j].h.Addrs()}); err != nil {
				return fmt.Errorf("member %d dials %d: %w", i, j, err)
			}
		}
		return nil
	})
	if err != nil {
		b.Fatalf("%s: connect: %v", design, err)
	}
	if err := waitFor(ctx, 60*time.Second, 200*time.Millisecond, func() bool { return gsConnected(ms) }); err != nil {
		b.Fatalf("%s: the members' connections do not reach every member: %v", design, err)
	}
	if err := waitFor(ctx, 60*time.Second, 200*time.Millisecond, func() bool {
		mn, _ := gsMesh(ms)
		return mn >= 1
	}); err != nil {
		mn, mean := gsMesh(ms)
		b.Fatalf("%s: a member has no mesh peer (min %d, mean %.1f): %v", design, mn, mean, err)
	}
	// Warm-up: one message must reach every member.
	warm := false
	for try := range 3 {
		idx := uint64(math.MaxUint32) + uint64(try)
		if err := ms[0].topic.Publish(ctx, msgPayload(time.Since(t0), idx)); err != nil {
			b.Fatalf("%s: warm-up: %v", design, err)
		}
		if waitFor(ctx, 10*time.Second, 50*time.Millisecond, func() bool { return gsReached(ms, idx) == len(ms) }) == nil {
			warm = true
			break
		}
		b.Logf("%s: warm-up message %d reached %d of %d members", design, try, gsReached(ms, idx), len(ms))
	}
	if !warm {
		b.Fatalf("%s: no warm-up message reached every member", design)
	}
	r.MeshMin, r.MeshMean = gsMesh(ms)
	r.SetupS = time.Since(t).Seconds()
	b.Logf("%s: %d members connected (each dialled %d), mesh min %d mean %.1f, warm in %.1f s", design, sc.Members, sc.Dial, r.MeshMin, r.MeshMean, r.SetupS)
	for _, m := range ms {
		m.mu.Lock()
		m.got = nil
		m.mu.Unlock()
	}

	pubs := make([]*gsMember, sc.Publishers)
	for i := range pubs {
		pubs[i] = ms[i*sc.Members/sc.Publishers]
	}
	total := max(1, int(math.Round(sc.Rate*sc.Window.Seconds())))
	r.Scheduled = total
	interval := time.Duration(float64(time.Second) / sc.Rate)
	errs := make([]error, total)
	ib0 := processCPU()
	_, iw0, _ := satProcIO("self")
	tb := time.Now()
	pause(ctx, sc.Baseline)
	idleS := time.Since(tb).Seconds()
	ib1 := processCPU()
	_, iw1, _ := satProcIO("self")
	r.Baseline = sc.Baseline
	r.IdleCores = (ib1 - ib0).Seconds() / idleS
	r.IdleWireBytesPerS = float64(iw1-iw0) / idleS
	c0 := processCPU()
	_, w0, _ := satProcIO("self")
	bw0 := bwc.GetBandwidthTotals()
	m0 := readMachineStat()
	rpc0, drop0, dup0, rej0, und0 := counts.recvRPC.Load(), counts.dropRPC.Load(), counts.dup.Load(), counts.reject.Load(), counts.undeliverable.Load()
	b.StartTimer()
	tp := time.Now()
	var pwg sync.WaitGroup
	for i := range total {
		if d := time.Until(tp.Add(time.Duration(i) * interval)); d > 0 {
			pause(ctx, d)
		}
		p := pubs[i%len(pubs)]
		pwg.Go(func() { errs[i] = p.topic.Publish(ctx, msgPayload(time.Since(t0), uint64(i))) })
	}
	pwg.Wait()
	for _, e := range errs {
		if e == nil {
			r.Published++
		}
	}
	r.Expected = r.Published * len(ms)
	_ = waitFor(ctx, sc.Drain, 10*time.Millisecond, func() bool {
		for _, m := range ms {
			m.mu.Lock()
			n := len(m.got)
			m.mu.Unlock()
			if n < r.Published {
				return false
			}
		}
		return true
	})
	b.StopTimer()
	wall := time.Since(tp).Seconds()
	c1 := processCPU()
	_, w1, _ := satProcIO("self")
	bw1 := bwc.GetBandwidthTotals()
	m1 := readMachineStat()
	var lats []time.Duration
	for _, m := range ms {
		m.mu.Lock()
		seen := map[uint64]bool{}
		for _, d := range m.got {
			if d.idx < uint64(total) && errs[d.idx] == nil && !seen[d.idx] {
				seen[d.idx] = true
				lats = append(lats, d.lat)
			}
		}
		m.mu.Unlock()
	}
	r.Delivered = len(lats)
	r.Ratio = ratio(float64(r.Delivered), float64(r.Expected))
	r.DeliveryMs = distMs(lats)
	r.WallS = wall
	d := float64(max(r.Delivered, 1))
	r.CPUUsPerDelivery = 1e6 * (c1 - c0).Seconds() / d
	r.CPUCores = (c1 - c0).Seconds() / wall
	r.WireBytesPerDelivery = float64(w1-w0) / d
	r.StreamBytesPerDelivery = float64(bw1.TotalOut-bw0.TotalOut) / d
	r.RPCsReceived = counts.recvRPC.Load() - rpc0
	r.RPCsDropped = counts.dropRPC.Load() - drop0
	r.DuplicatesPerDelivery = float64(counts.dup.Load()-dup0) / d
	r.Rejected = counts.reject.Load() - rej0
	r.Undeliverable = counts.undeliverable.Load() - und0
	if m0.ok && m1.ok {
		r.MachineBusy = float64(m1.busy-m0.busy) / userHZ / wall
	}
	r.LoadAvg = loadAvg()
	r.NetCPUUsPerDelivery = 1e6 * ((c1 - c0).Seconds() - r.IdleCores*wall) / d
	r.NetWireBytesPerDelivery = (float64(w1-w0) - r.IdleWireBytesPerS*wall) / d
	return r
}

// gsConnected reports whether every member reaches every other over the
// members' connections.
func gsConnected(ms []*gsMember) bool {
	idx := make(map[peer.ID]int, len(ms))
	for i, m := range ms {
		idx[m.h.ID()] = i
	}
	seen := make([]bool, len(ms))
	stack := []int{0}
	seen[0] = true
	n := 1
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, p := range ms[i].h.Network().Peers() {
			if j, ok := idx[p]; ok && !seen[j] {
				seen[j] = true
				n++
				stack = append(stack, j)
			}
		}
	}
	return n == len(ms)
}

// gsMesh returns the smallest and the mean mesh size over the members.
func gsMesh(ms []*gsMember) (int64, float64) {
	mn, sum := int64(math.MaxInt64), int64(0)
	for _, m := range ms {
		v := m.tr.mesh.Load()
		mn = min(mn, v)
		sum += v
	}
	return mn, float64(sum) / float64(len(ms))
}

// gsReached counts the members that received message idx.
func gsReached(ms []*gsMember, idx uint64) int {
	n := 0
	for _, m := range ms {
		m.mu.Lock()
		for _, d := range m.got {
			if d.idx == idx {
				n++
				break
			}
		}
		m.mu.Unlock()
	}
	return n
}
