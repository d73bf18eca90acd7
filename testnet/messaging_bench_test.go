package testnet

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/node"
	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/ring"
)

const (
	// msgSeed derives every node's seed (the random choices of the nodes;
	// identities are fresh Ed25519 keys each run).
	msgSeed = 0x6d73_6700
	// msgGroupName is the one group of BenchmarkGroupEndToEnd.
	msgGroupName = "bench"
	// msgPayloadSize is the size of every message: send time, index, and
	// padding, about a chat message.
	msgPayloadSize = 128
)

// msgGroupScale sizes one group scenario.
type msgGroupScale struct {
	Supernodes int `json:"supernodes"`
	Clients    int `json:"clients"`
	Capacity   int `json:"capacity"`
	// Rate publishes per second for Window, spread round-robin over
	// Publishers (members too), open loop: each publish starts on its
	// schedule whether or not the previous ones were answered.
	Rate       float64       `json:"rate_per_s"`
	Window     time.Duration `json:"window_ns"`
	Publishers int           `json:"publishers"`
	// Baseline is the idle window before publishing whose CPU use is
	// subtracted; Drain how long deliveries may trail the last answered
	// publish; AttachWithin how long the clients get to attach.
	// Announce is every node's announce interval.
	Announce     time.Duration `json:"announce_ns"`
	Baseline     time.Duration `json:"baseline_ns"`
	Drain        time.Duration `json:"drain_ns"`
	AttachWithin time.Duration `json:"attach_within_ns"`
	Short        bool          `json:"short"`
}

// msgGroupScaleFor returns the scale: tiny under -short (CI), else 10
// supernodes and 200 clients; OVERLAYD_MSG_SUPERNODES, OVERLAYD_MSG_CLIENTS,
// OVERLAYD_MSG_RATE, OVERLAYD_MSG_WINDOW and OVERLAYD_MSG_ANNOUNCE (the
// announce interval, 1 s) override the full scale.
//
// 200 is the largest client count the shared 2-core development machine
// carried reliably in one process with the benchmark's 1 s announce
// interval: the idle network alone (every node verifies the signatures of
// 10 announcements a second; keepalives every 2 s) used 0.75 core at 200
// clients and 1.6 cores at 400. 400 worked only while nobody else used the
// machine; at 500 and 1,000 some clients had not attached after 3 minutes.
// See docs/BENCHMARKS.md, "Messaging end to end".
func msgGroupScaleFor(b *testing.B) msgGroupScale {
	if testing.Short() {
		return msgGroupScale{Supernodes: 2, Clients: 20, Capacity: 200, Rate: 20, Window: time.Second, Publishers: 2, Announce: time.Second,
			Baseline: 500 * time.Millisecond, Drain: 5 * time.Second, AttachWithin: 30 * time.Second, Short: true}
	}
	sc := msgGroupScale{Supernodes: 10, Clients: 200, Capacity: 200, Rate: 20, Window: 5 * time.Second, Publishers: 4, Announce: time.Second,
		Baseline: 3 * time.Second, Drain: 30 * time.Second, AttachWithin: 3 * time.Minute}
	envInt(b, "OVERLAYD_MSG_SUPERNODES", &sc.Supernodes, 1, 50)
	// GroupMembers answers in one session frame (64 KiB + 1 KiB): about
	// 1,800 member IDs. testnet fits 2,000 nodes in one process.
	envInt(b, "OVERLAYD_MSG_CLIENTS", &sc.Clients, 2, 1700)
	if s := os.Getenv("OVERLAYD_MSG_RATE"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v < 0.5 || v > 1000 {
			b.Fatalf("OVERLAYD_MSG_RATE=%q: want publishes per second within [0.5, 1000]", s)
		}
		sc.Rate = v
	}
	envDuration(b, "OVERLAYD_MSG_WINDOW", 500*time.Millisecond, 2*time.Minute, &sc.Window)
	envDuration(b, "OVERLAYD_MSG_ANNOUNCE", 500*time.Millisecond, 30*time.Second, &sc.Announce)
	// Room for every client at its home, twice over.
	sc.Capacity = max(sc.Capacity, 2*sc.Clients/sc.Supernodes)
	sc.Publishers = min(sc.Publishers, sc.Clients)
	return sc
}

// msgGroupReport is one group scenario's outcome; it is written as JSON.
type msgGroupReport struct {
	Design string        `json:"design"`
	Scale  msgGroupScale `json:"scale"`
	Seed   uint64        `json:"seed"`
	// Members of the group (every client), the supernodes they are
	// attached to, and how many of them sit on the group's home itself
	// (reached without an inter-supernode frame).
	Members               int     `json:"members"`
	SupernodesWithMembers int     `json:"supernodes_with_members"`
	HomeLocalMembers      int     `json:"home_local_members"`
	Home                  string  `json:"home"`
	StartS                float64 `json:"start_s"`
	AttachS               float64 `json:"attach_s"`
	JoinS                 float64 `json:"join_s"`
	JoinErrors            int     `json:"join_errors"`

	// Publishes scheduled, answered with a sequence number, and failed.
	Scheduled     int    `json:"scheduled"`
	Published     int    `json:"published"`
	PublishErrors int    `json:"publish_errors"`
	FirstError    string `json:"first_error,omitempty"`
	PublishMs     dist   `json:"publish_result_ms"`
	// OfferedRate is what the schedule achieved (publishes started per
	// second of the window).
	OfferedRate float64 `json:"offered_rate_per_s"`

	// Numbered publishes: answered, plus those whose answer was lost but
	// which members received (NumberedUnanswered), plus those the home
	// counted that no member received (NumberedUnseen).
	Numbered           int `json:"numbered"`
	NumberedUnanswered int `json:"numbered_unanswered"`
	NumberedUnseen     int `json:"numbered_unseen"`
	// Epochs is how many group-home epochs the publishes and deliveries
	// carry: 1 unless the group's home changed in the window (a ring
	// change, when a starved supernode misses its announcements).
	Epochs int `json:"epochs"`
	// Deliveries: every member must get every numbered publish exactly
	// once, in sequence order.
	Expected       int     `json:"expected_deliveries"`
	Delivered      int     `json:"delivered"`
	DeliveredRatio float64 `json:"delivered_ratio"`
	Missing        int     `json:"missing"`
	Duplicates     int     `json:"duplicates"`
	OutOfOrder     int     `json:"out_of_order"`
	Unexpected     int     `json:"unexpected"`
	Gaps           uint64  `json:"gap_dropped"`
	BadPayloads    int     `json:"bad_payloads"`
	Complete       bool    `json:"complete"`
	// DeliveryMs is send → member's receipt over every delivery;
	// CompletionMs send → the last member's receipt, per message.
	DeliveryMs   dist `json:"delivery_ms"`
	CompletionMs dist `json:"completion_ms"`
	// CompletedMessages is how many messages reached every member.
	CompletedMessages int `json:"completed_messages"`
	// PerPublish are the figures of each scheduled publish, by index.
	PerPublish []msgPublishFigures `json:"per_publish"`
	// P99InclLossMs is the p99 over every expected delivery, a missing one
	// counting as infinitely late: -1 when more than 1% are missing.
	P99InclLossMs float64 `json:"p99_incl_loss_ms"`
	// DrainS is from the last publish answer to the last delivery.
	DrainS float64 `json:"drain_s"`
	// Failovers counts client sessions that ended and were replaced by
	// a new attachment between the baseline and the end of the window
	// (Status().Failovers): a session the supernode or the client gave
	// up on, for example after 3 keepalives missed while the process was
	// starved of CPU. Group messages in flight to it are lost.
	Failovers int `json:"failovers"`

	// Frames: the group home's count of GroupMessage frames it queued to
	// other supernodes (Router.Stats().GroupFramesSent), per publish it
	// numbered. FramesSource says where the figure came from.
	FramesPerPublish float64 `json:"frames_per_publish"`
	FramesSource     string  `json:"frames_source"`
	// FramesTarget is what the design should send per publish: batched,
	// one per supernode holding members other than the home; naive, one
	// per member not on the home. A frame the home could not queue (its
	// link's queue of 4,096 frames full) is not counted as sent.
	FramesTarget  int    `json:"frames_target"`
	HomePublishes uint64 `json:"home_publishes"`
	// FanoutJobsPerPublish is the other supernodes' fan-out jobs (the
	// overlayd_supernode_fanout_jobs_total series of their registries) per
	// numbered publish: one per batched frame received; 0 in the naive design,
	// whose per-member frames bypass the engine. A cross-check read from
	// Prometheus.
	FanoutJobsPerPublish float64 `json:"fanout_jobs_per_publish"`
	FanoutRefused        uint64  `json:"fanout_refused"`
	OutboxDrops          float64 `json:"outbox_frames_dropped"`

	// CPU, all nodes being in this process: Baseline is the idle window
	// before publishing, Window from the first publish to the last
	// delivery (or the drain deadline). By role from labelled CPU
	// profiles; see messaging_cpu_test.go.
	Baseline msgCPUUse `json:"cpu_baseline"`
	Window   msgCPUUse `json:"cpu_window"`
	// Net CPU per publish: the window's CPU less the baseline's rate over
	// the window's length, divided by the publishes numbered.
	SupernodeCPUMsPerPublish float64 `json:"supernode_cpu_ms_per_publish"`
	ClientCPUMsPerPublish    float64 `json:"client_cpu_ms_per_publish"`
	ProcessCPUMsPerPublish   float64 `json:"process_cpu_ms_per_publish"`
	SupernodeCores           float64 `json:"supernode_cores_window"`
	SupernodeCoresBaseline   float64 `json:"supernode_cores_baseline"`
}

// msgGroupCompare is the same-run comparison of the two designs.
type msgGroupCompare struct {
	Scale        msgGroupScale `json:"scale"`
	BatchedP99Ms float64       `json:"batched_p99_ms"`
	NaiveP99Ms   float64       `json:"naive_p99_ms"`
	// P99Ratio is naive over batched, over delivered messages only.
	P99Ratio float64 `json:"p99_naive_over_batched"`
	// The same counting a lost delivery as infinitely late: -1 is "lost
	// more than 1%"; P99RatioInclLoss is +Inf (written as -1) when naive
	// lost more than 1% and batched did not.
	BatchedP99InclLossMs float64 `json:"batched_p99_incl_loss_ms"`
	NaiveP99InclLossMs   float64 `json:"naive_p99_incl_loss_ms"`
	P99RatioInclLoss     float64 `json:"p99_incl_loss_naive_over_batched"`
	// Target: batched p99 at least 5× lower than naive, over delivered
	// messages, and counting losses.
	TargetDelivered  bool    `json:"target_5x_delivered"`
	TargetInclLoss   bool    `json:"target_5x_incl_loss"`
	BatchedFrames    float64 `json:"batched_frames_per_publish"`
	NaiveFrames      float64 `json:"naive_frames_per_publish"`
	BatchedSNCPUMs   float64 `json:"batched_supernode_cpu_ms_per_publish"`
	NaiveSNCPUMs     float64 `json:"naive_supernode_cpu_ms_per_publish"`
	BatchedDelivered float64 `json:"batched_delivered_ratio"`
	NaiveDelivered   float64 `json:"naive_delivered_ratio"`
	BatchedAnswered  int     `json:"batched_publishes_answered"`
	NaiveAnswered    int     `json:"naive_publishes_answered"`
}

// BenchmarkGroupEndToEnd measures group messaging end to end: S supernodes
// and C ordinary nodes in this process (real libp2p hosts on 127.0.0.1),
// every client a member of one group, publishing at a steady rate, each
// member's listener timing every delivery against the send time carried in
// the payload. Each sub-benchmark runs the whole scenario once per b.N
// iteration (run it with -benchtime=1x) for one design of the group home:
//
//	design=batched  the node's default: the home sends ONE frame per
//	                supernode holding members, which fans it out locally
//	design=naive    every supernode started with
//	                node.WithPerMemberGroupFanoutForTest(): the home sends
//	                one frame per member
//
// Every member must receive every answered publish exactly once and in
// sequence order; a miss is a benchmark error in the batched design and
// is reported (not fatal) in the naive one, where it is a finding. The
// p99 target (batched ≥ 5× lower than naive at the same rate) is measured
// and reported, not enforced: a performance figure on a shared machine.
//
// Scale. Under -short: 2 supernodes, 20 clients, 20 publishes/s for 1 s
// (CI's `go test -short -run '^$' -bench . -benchtime=1x ./...`). Otherwise
// 10 supernodes (capacity 200), 200 clients (see msgGroupScaleFor for why
// not 1,000), 20 publishes/s for 5 s from 4 publishers;
// OVERLAYD_MSG_SUPERNODES, OVERLAYD_MSG_CLIENTS, OVERLAYD_MSG_RATE and
// OVERLAYD_MSG_WINDOW override it.
//
// Report. With OVERLAYD_REPORT_DIR set, each scenario writes its report to
// msg-group-<design>.json, the naive run adds msg-group-compare.json (the
// k-th naive run against the k-th batched run of the same go test
// process), and every report is appended to msg-runs.jsonl.
func BenchmarkGroupEndToEnd(b *testing.B) {
	sc := msgGroupScaleFor(b)
	var batched []*msgGroupReport
	naiveRuns := 0
	for _, design := range []string{"batched", "naive"} {
		b.Run("design="+design, func(b *testing.B) {
			var r *msgGroupReport
			for range b.N {
				r = msgRunGroup(b, sc, design)
			}
			b.ReportMetric(r.DeliveryMs.P50, "p50-ms")
			b.ReportMetric(r.DeliveryMs.P99, "p99-ms")
			b.ReportMetric(r.CompletionMs.P99, "complete-p99-ms")
			b.ReportMetric(100*r.DeliveredRatio, "delivered-%")
			b.ReportMetric(r.FramesPerPublish, "frames/publish")
			b.ReportMetric(float64(r.SupernodesWithMembers), "sn-with-members")
			b.ReportMetric(r.SupernodeCPUMsPerPublish, "sn-cpu-ms/publish")
			b.ReportMetric(r.ProcessCPUMsPerPublish, "proc-cpu-ms/publish")
			b.ReportMetric(r.PublishMs.P99, "publish-p99-ms")
			switch {
			case design == "batched":
				batched = append(batched, r)
			case len(batched) > 0:
				msgCompareGroup(b, sc, batched[min(naiveRuns, len(batched)-1)], r)
				naiveRuns++
			}
		})
	}
}

func msgCompareGroup(b *testing.B, sc msgGroupScale, bt, nv *msgGroupReport) {
	b.Helper()
	c := msgGroupCompare{
		Scale: sc, BatchedP99Ms: bt.DeliveryMs.P99, NaiveP99Ms: nv.DeliveryMs.P99,
		BatchedP99InclLossMs: bt.P99InclLossMs, NaiveP99InclLossMs: nv.P99InclLossMs,
		BatchedFrames: bt.FramesPerPublish, NaiveFrames: nv.FramesPerPublish,
		BatchedSNCPUMs: bt.SupernodeCPUMsPerPublish, NaiveSNCPUMs: nv.SupernodeCPUMsPerPublish,
		BatchedDelivered: bt.DeliveredRatio, NaiveDelivered: nv.DeliveredRatio,
		BatchedAnswered: bt.Published, NaiveAnswered: nv.Published,
	}
	if bt.DeliveryMs.P99 > 0 {
		c.P99Ratio = nv.DeliveryMs.P99 / bt.DeliveryMs.P99
	}
	c.TargetDelivered = c.P99Ratio >= 5
	switch {
	case bt.P99InclLossMs > 0 && nv.P99InclLossMs > 0:
		c.P99RatioInclLoss = nv.P99InclLossMs / bt.P99InclLossMs
		c.TargetInclLoss = c.P99RatioInclLoss >= 5
	case bt.P99InclLossMs > 0: // naive lost more than 1%
		c.P99RatioInclLoss, c.TargetInclLoss = -1, true
	default:
		c.P99RatioInclLoss = 0
	}
	writeReport(b, "msg-runs.jsonl", "msg-group-compare.json", c)
	b.ReportMetric(c.P99Ratio, "p99-naive/batched")
	b.Logf("same process: delivery p99 naive %.2f ms vs batched %.2f ms: %.2f× over delivered messages (target ≥ 5×: %v); counting losses %.2f vs %.2f ms (target: %v); delivered %.2f%% vs %.2f%%; frames/publish %.1f vs %.1f; supernode CPU %.2f vs %.2f ms/publish",
		c.NaiveP99Ms, c.BatchedP99Ms, c.P99Ratio, c.TargetDelivered, c.NaiveP99InclLossMs, c.BatchedP99InclLossMs, c.TargetInclLoss,
		100*c.NaiveDelivered, 100*c.BatchedDelivered, c.NaiveFrames, c.BatchedFrames, c.NaiveSNCPUMs, c.BatchedSNCPUMs)
}

// msgDelivery is one group message as a member received it.
type msgDelivery struct {
	seq   uint64
	idx   uint32
	epoch uint64
	// lat is send → receipt; recv the receipt, as time since t0.
	lat, recv time.Duration
}

// msgMember collects one member's deliveries; its goroutine owns it until
// the harness stops it.
type msgMember struct {
	got  []msgDelivery
	gaps uint64
	bad  int
}

// msgPublish is one scheduled publish.
// msgPublishFigures are one publish's figures in the report: its answer
// time (-1 without an answer), how many members it reached, and its
// delivery latencies, so that a latency tail can be placed in time
// (publish i was due at i / rate seconds into the window).
type msgPublishFigures struct {
	Index      int     `json:"i"`
	AnswerMs   float64 `json:"answer_ms"`
	Reached    int     `json:"reached"`
	DeliveryMs dist    `json:"delivery_ms"`
}

type msgPublish struct {
	seq, epoch uint64
	err        error
	took       time.Duration
}

// msgPayload encodes the send time (since t0), the publish index and
// padding.
func msgPayload(sent time.Duration, idx uint64) []byte {
	p := make([]byte, msgPayloadSize)
	binary.BigEndian.PutUint64(p[0:8], uint64(sent))
	binary.BigEndian.PutUint64(p[8:16], idx)
	return p
}

func msgParsePayload(p []byte) (sent time.Duration, idx uint64, ok bool) {
	if len(p) < 16 {
		return 0, 0, false
	}
	return time.Duration(binary.BigEndian.Uint64(p[0:8])), binary.BigEndian.Uint64(p[8:16]), true
}

// msgRunGroup runs one group scenario.
func msgRunGroup(b *testing.B, sc msgGroupScale, design string) *msgGroupReport {
	b.Helper()
	b.StopTimer()
	budget := sc.AttachWithin + sc.Window + sc.Drain + sc.Baseline + 2*time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	r := &msgGroupReport{Design: design, Scale: sc, Seed: msgSeed, Members: sc.Clients}

	t := time.Now()
	net := msgStartSupernodes(ctx, b, sc.Supernodes, sc.Capacity, sc.Announce, msgSeed, msgSeed+1000, design == "naive")
	defer net.Close()
	clients := net.startClients(ctx, b, make([]crypto.PrivKey, sc.Clients))
	r.StartS = time.Since(t).Seconds()
	b.Logf("design=%s: %d supernodes and %d clients started in %.1f s", design, sc.Supernodes, sc.Clients, r.StartS)
	t = time.Now()
	at := msgWaitAttached(ctx, b, clients, nil, sc.AttachWithin)
	r.AttachS = time.Since(t).Seconds()

	homeID, err := peer.Decode(net.sns[0].Ring().Lookup([]byte(msgGroupName)))
	if err != nil {
		b.Fatalf("group home: %v", err)
	}
	r.Home = homeID.String()
	var homeReg *prometheus.Registry
	for i, sn := range net.sns {
		if sn.ID() == homeID {
			homeReg = net.regs[i]
		}
	}
	holding := map[peer.ID]bool{}
	for _, s := range at {
		holding[s] = true
		if s == homeID {
			r.HomeLocalMembers++
		}
	}
	r.SupernodesWithMembers = len(holding)
	r.FramesTarget = r.Members - r.HomeLocalMembers
	if design == "batched" {
		r.FramesTarget = len(holding)
		if holding[homeID] {
			r.FramesTarget--
		}
	}

	// Listeners before joining, so that nothing is missed; each drained by
	// its own goroutine, which stamps nothing itself: the node's Inbound
	// time is when its session goroutine handled the frame.
	t0 := time.Now()
	members := make([]*msgMember, len(clients))
	var delivered atomic.Int64
	stop := make(chan struct{})
	var dwg sync.WaitGroup
	for i, c := range clients {
		l := c.Client().Listen()
		m := &msgMember{}
		members[i] = m
		msgWithRole(ctx, msgRoleHarness, func(context.Context) {
			dwg.Go(func() {
				defer l.Close()
				for {
					select {
					case <-stop:
						return
					case in := <-l.C:
						switch {
						case in.Kind == "gap":
							m.gaps += in.Dropped
						case in.Kind == "group" && in.Group == msgGroupName:
							sent, idx, ok := msgParsePayload(in.Payload)
							if !ok {
								m.bad++
								continue
							}
							recv := in.Time.Sub(t0)
							m.got = append(m.got, msgDelivery{seq: in.Seq, epoch: in.Epoch, idx: uint32(idx), lat: recv - sent, recv: recv})
							delivered.Add(1)
						}
					}
				}
			})
		})
	}
	stopDrains := sync.OnceFunc(func() { close(stop); dwg.Wait() })
	defer stopDrains()

	t = time.Now()
	for _, c := range clients {
		// An error here means the session broke as the join was written;
		// the node keeps the membership and re-joins on its next session,
		// so the wait below decides.
		if err := c.Client().Join(msgGroupName); err != nil {
			r.JoinErrors++
		}
	}
	want := map[string]bool{}
	for _, c := range clients {
		want[c.ID().String()] = true
	}
	var lastMembers int
	err = waitFor(ctx, 60*time.Second, 250*time.Millisecond, func() bool {
		qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
		defer qcancel()
		ms, err := clients[0].Client().Members(qctx, msgGroupName)
		if err != nil {
			return false
		}
		n := 0
		for _, m := range ms {
			if want[m.String()] {
				n++
			}
		}
		lastMembers = n
		return n == len(clients) && len(ms) == len(clients)
	})
	if err != nil {
		b.Fatalf("the group home lists %d of %d members: %v", lastMembers, len(clients), err)
	}
	r.JoinS = time.Since(t).Seconds()

	// Idle baseline: keepalives, announcements, presence and membership
	// refreshes of the whole network.
	cw := msgStartCPU()
	pause(ctx, sc.Baseline)
	if r.Baseline, err = cw.stop("msg-group-" + design + "-baseline.pprof"); err != nil {
		b.Logf("baseline CPU profile: %v", err)
	}

	failoversBefore := msgFailovers(clients)
	homeBefore := msgReadRouter(homeReg)
	refusedBefore := msgSumRefused(net)
	jobsBefore, dropsBefore := msgFanoutCounts(net, homeID)

	// Publish, open loop.
	publishers := make([]*node.Node, sc.Publishers)
	for i := range publishers {
		publishers[i] = clients[i*len(clients)/sc.Publishers]
	}
	total := int(math.Round(sc.Rate * sc.Window.Seconds()))
	r.Scheduled = total
	pubs := make([]msgPublish, total)
	interval := time.Duration(float64(time.Second) / sc.Rate)
	cw = msgStartCPU()
	b.StartTimer()
	tp := time.Now()
	var pwg sync.WaitGroup
	defer pwg.Wait() // on an early b.Fatal; a no-op after the wait below
	for i := range total {
		// Publish i is due at tp + i×interval; a late one goes at once,
		// so that the schedule catches up instead of thinning out.
		if d := time.Until(tp.Add(time.Duration(i) * interval)); d > 0 {
			pause(ctx, d)
		}
		if ctx.Err() != nil {
			b.Fatalf("publishing: %v", ctx.Err())
		}
		pub := publishers[i%len(publishers)]
		msgWithRole(ctx, msgRoleClient, func(ctx context.Context) {
			pwg.Go(func() {
				s := time.Now()
				res, err := pub.Client().Publish(ctx, msgGroupName, msgPayload(s.Sub(t0), uint64(i)))
				pubs[i] = msgPublish{seq: res.Seq, epoch: res.Epoch, err: err, took: time.Since(s)}
			})
		})
	}
	r.OfferedRate = float64(total) / max(time.Since(tp).Seconds(), sc.Window.Seconds())
	pwg.Wait()
	answered := time.Now()
	var pubTimes []time.Duration
	for _, p := range pubs {
		if p.err != nil {
			r.PublishErrors++
			if r.FirstError == "" {
				r.FirstError = p.err.Error()
			}
			continue
		}
		r.Published++
		pubTimes = append(pubTimes, p.took)
	}
	r.PublishMs = distMs(pubTimes)
	// Every publish the home numbered must reach every member, answered
	// or not.
	homeNumbered := func() int {
		return int(msgReadRouter(homeReg).GroupPublishes - homeBefore.GroupPublishes)
	}
	r.Complete = waitFor(ctx, sc.Drain, 10*time.Millisecond, func() bool {
		return delivered.Load() >= int64(homeNumbered()*len(clients))
	}) == nil
	b.StopTimer()
	if r.Window, err = cw.stop("msg-group-" + design + "-window.pprof"); err != nil {
		b.Logf("window CPU profile: %v", err)
	}
	stopDrains()
	r.Failovers = msgFailovers(clients) - failoversBefore

	after := msgReadRouter(homeReg)
	r.HomePublishes = after.GroupPublishes - homeBefore.GroupPublishes
	r.FramesPerPublish = float64(after.GroupFramesSent-homeBefore.GroupFramesSent) / float64(max(r.HomePublishes, 1))
	r.FramesSource = "group home's overlayd_supernode_group_frames_sent_total"
	r.FanoutRefused = msgSumRefused(net) - refusedBefore
	jobsAfter, dropsAfter := msgFanoutCounts(net, homeID)
	r.OutboxDrops = dropsAfter - dropsBefore

	msgCheckGroup(r, pubs, members, t0, answered, homeNumbered())
	// Work is done for every numbered publish, answered or not.
	numbered := float64(max(r.Numbered+r.NumberedUnseen, 1))
	r.FanoutJobsPerPublish = (jobsAfter - jobsBefore) / numbered
	msgGroupCPU(r, numbered)
	writeReport(b, "msg-runs.jsonl", "msg-group-"+design+".json", r)
	msgLogGroup(b, r)
	if !r.Complete || r.Missing > 0 || r.OutOfOrder > 0 || r.Duplicates > 0 || r.Epochs > 1 {
		msg := fmt.Sprintf("design=%s: delivered %d of %d (missing %d, duplicates %d, out of order %d, unexpected %d, gaps %d, home epochs %d, client failovers %d; Go scheduler p99 %.0f ms)",
			design, r.Delivered, r.Expected, r.Missing, r.Duplicates, r.OutOfOrder, r.Unexpected, r.Gaps, r.Epochs, r.Failovers, r.Window.SchedMs.P99)
		if design == "batched" {
			b.Error(msg)
		} else {
			b.Log("NAIVE DESIGN LOST OR REORDERED MESSAGES: " + msg)
		}
	}
	if r.PublishErrors > 0 && design == "batched" {
		b.Errorf("%d of %d publishes failed: %s", r.PublishErrors, total, r.FirstError)
	}
	return r
}

// msgCheckGroup checks every member's deliveries and fills the delivery
// figures of r. A publish's sequence number comes from its answer or, when
// the answer was lost, from what members received (the payload carries the
// publish index); homeNumbered (-1 if unknown) is how many publishes the
// home numbered, which also counts those no member received.
func msgCheckGroup(r *msgGroupReport, pubs []msgPublish, members []*msgMember, t0, answered time.Time, homeNumbered int) {
	// Each publish index is numbered once: (epoch, seq) from its answer,
	// else from the first member that received it.
	type num struct{ epoch, seq uint64 }
	numOf := make([]num, len(pubs))
	known := make([]bool, len(pubs))
	epochs := map[uint64]bool{}
	for i, p := range pubs {
		if p.err == nil {
			numOf[i], known[i] = num{p.epoch, p.seq}, true
			epochs[p.epoch] = true
		}
	}
	for _, m := range members {
		for _, d := range m.got {
			epochs[d.epoch] = true
			if i := int(d.idx); i < len(pubs) && !known[i] {
				numOf[i], known[i] = num{d.epoch, d.seq}, true
				r.NumberedUnanswered++
			}
		}
	}
	r.Epochs = len(epochs)
	r.Numbered = r.Published + r.NumberedUnanswered
	if homeNumbered > r.Numbered {
		r.NumberedUnseen = homeNumbered - r.Numbered
	}
	r.Expected = (r.Numbered + r.NumberedUnseen) * len(members)
	var lats []time.Duration
	perPub := make([][]time.Duration, len(pubs))
	completion := make([]time.Duration, len(pubs))
	reached := make([]int, len(pubs))
	var last time.Duration // the last receipt, since t0
	for _, m := range members {
		r.Gaps += m.gaps
		r.BadPayloads += m.bad
		seen := map[num]bool{}
		var prev num
		for k, d := range m.got {
			n := num{d.epoch, d.seq}
			if seen[n] {
				r.Duplicates++
				continue
			}
			seen[n] = true
			if k > 0 && n.epoch == prev.epoch && n.seq <= prev.seq {
				r.OutOfOrder++
			}
			prev = n
			i := int(d.idx)
			if i >= len(pubs) || numOf[i] != n {
				r.Unexpected++
				continue
			}
			r.Delivered++
			lats = append(lats, d.lat)
			perPub[i] = append(perPub[i], d.lat)
			completion[i] = max(completion[i], d.lat)
			reached[i]++
			last = max(last, d.recv)
		}
	}
	r.Missing = r.Expected - r.Delivered
	if r.Expected > 0 {
		r.DeliveredRatio = float64(r.Delivered) / float64(r.Expected)
	}
	r.DeliveryMs = distMs(lats)
	// p99 over every expected delivery, a missing one counting as never.
	r.P99InclLossMs = -1
	if rank := int(math.Ceil(0.99 * float64(r.Expected))); rank >= 1 && rank <= len(lats) {
		r.P99InclLossMs = float64(lats[rank-1]) / 1e6
	}
	var comp []time.Duration
	for i := range pubs {
		if known[i] && reached[i] == len(members) {
			comp = append(comp, completion[i])
		}
	}
	r.CompletionMs = distMs(comp)
	r.CompletedMessages = len(comp)
	r.PerPublish = make([]msgPublishFigures, len(pubs))
	for i, p := range pubs {
		f := msgPublishFigures{Index: i, Reached: reached[i], AnswerMs: -1, DeliveryMs: distMs(perPub[i])}
		if p.err == nil {
			f.AnswerMs = float64(p.took) / 1e6
		}
		r.PerPublish[i] = f
	}
	r.DrainS = max(0, (last - answered.Sub(t0)).Seconds())
}

// msgGroupCPU derives the per-publish CPU figures from the two windows,
// over the numbered publishes.
func msgGroupCPU(r *msgGroupReport, numbered float64) {
	net := func(u, base float64) float64 {
		if r.Window.WallS <= 0 || r.Baseline.WallS <= 0 {
			return -1
		}
		return 1000 * (u - base/r.Baseline.WallS*r.Window.WallS) / numbered
	}
	r.ProcessCPUMsPerPublish = net(r.Window.ProcessS, r.Baseline.ProcessS)
	r.SupernodeCPUMsPerPublish, r.ClientCPUMsPerPublish = -1, -1
	if r.Window.ByRoleS != nil && r.Baseline.ByRoleS != nil {
		r.SupernodeCPUMsPerPublish = net(r.Window.ByRoleS[msgRoleSupernode], r.Baseline.ByRoleS[msgRoleSupernode])
		r.ClientCPUMsPerPublish = net(r.Window.ByRoleS[msgRoleClient], r.Baseline.ByRoleS[msgRoleClient])
	}
	r.SupernodeCores = r.Window.cores(msgRoleSupernode)
	r.SupernodeCoresBaseline = r.Baseline.cores(msgRoleSupernode)
}

// msgFailovers sums the clients' failover counts.
func msgFailovers(cs []*node.Node) int {
	n := 0
	for _, c := range cs {
		n += c.Status().Failovers
	}
	return n
}

// msgSumRefused sums the routers' refused fan-outs (0 without routers).
func msgSumRefused(n *msgNet) uint64 {
	var s uint64
	for _, reg := range n.regs {
		s += msgReadRouter(reg).FanoutRefused
	}
	return s
}

// msgFanoutCounts sums, from the supernodes' registries, the fan-out jobs
// of every supernode but the home and the frames any outbox dropped.
func msgFanoutCounts(n *msgNet, home peer.ID) (jobs, drops float64) {
	for i, sn := range n.sns {
		if sn.ID() != home {
			jobs += gather(n.regs[i])["overlayd_supernode_fanout_jobs_total"]
		}
		drops += gather(n.regs[i])["overlayd_supernode_fanout_frames_dropped_total"]
	}
	return jobs, drops
}

func msgLogGroup(b *testing.B, r *msgGroupReport) {
	b.Helper()
	b.Logf("design=%s: %d supernodes (%d hold members, %d members on the home), %d clients; started in %.1f s, attached in %.1f s, joined in %.1f s",
		r.Design, r.Scale.Supernodes, r.SupernodesWithMembers, r.HomeLocalMembers, r.Members, r.StartS, r.AttachS, r.JoinS)
	b.Logf("  publishes %d of %d answered (%.1f/s offered), result p50 %.2f ms p99 %.2f ms; errors %d %s",
		r.Published, r.Scheduled, r.OfferedRate, r.PublishMs.P50, r.PublishMs.P99, r.PublishErrors, r.FirstError)
	b.Logf("  numbered %d (%d unanswered but received, %d unseen, %d home epochs); deliveries %d of %d (%.3f%%), missing %d, dup %d, out of order %d, unexpected %d, gap-dropped %d; complete %v (drain %.1f s); %d messages reached every member; %d client failovers",
		r.Numbered, r.NumberedUnanswered, r.NumberedUnseen, r.Epochs, r.Delivered, r.Expected, 100*r.DeliveredRatio, r.Missing, r.Duplicates,
		r.OutOfOrder, r.Unexpected, r.Gaps, r.Complete, r.DrainS, r.CompletedMessages, r.Failovers)
	b.Logf("  delivery latency p50 %.2f p90 %.2f p99 %.2f max %.2f ms (p99 counting losses %.2f, -1 = over 1%% lost); last member p50 %.2f p99 %.2f ms",
		r.DeliveryMs.P50, r.DeliveryMs.P90, r.DeliveryMs.P99, r.DeliveryMs.Max, r.P99InclLossMs, r.CompletionMs.P50, r.CompletionMs.P99)
	b.Logf("  frames/publish %.2f (home; target %d), fan-out jobs/publish %.2f (other supernodes' registries), fan-outs refused %d, outbox drops %.0f",
		r.FramesPerPublish, r.FramesTarget, r.FanoutJobsPerPublish, r.FanoutRefused, r.OutboxDrops)
	b.Logf("  CPU window %.1f s: process %.2f cores, supernodes %.2f, clients %.2f (baseline %.2f / %.2f / %.2f); per publish net of baseline: supernodes %.2f ms, clients %.2f ms, process %.2f ms",
		r.Window.WallS, r.Window.ProcessS/max(r.Window.WallS, 1e-9), r.Window.cores(msgRoleSupernode), r.Window.cores(msgRoleClient),
		r.Baseline.ProcessS/max(r.Baseline.WallS, 1e-9), r.Baseline.cores(msgRoleSupernode), r.Baseline.cores(msgRoleClient),
		r.SupernodeCPUMsPerPublish, r.ClientCPUMsPerPublish, r.ProcessCPUMsPerPublish)
	b.Logf("  Go scheduler latency p50/p99 %.3f/%.3f ms in the window, %.3f/%.3f ms at baseline; GC cycles %d in the window; machine busy %.2f cores (baseline %.2f), load average %.2f",
		r.Window.SchedMs.P50, r.Window.SchedMs.P99, r.Baseline.SchedMs.P50, r.Baseline.SchedMs.P99, r.Window.GCCycles,
		r.Window.MachineBusyCores, r.Baseline.MachineBusyCores, r.Window.LoadAvg1)
}

// msgDirectScale sizes the direct-message scenarios.
type msgDirectScale struct {
	// Window is how long each mode sends; MaxPerWorker caps the messages
	// of one sending goroutine.
	Window       time.Duration `json:"window_ns"`
	MaxPerWorker int           `json:"max_per_worker"`
	Concurrency  int           `json:"concurrency"`
	Short        bool          `json:"short"`
}

// msgDirectReport is one direct-message scenario's outcome.
type msgDirectReport struct {
	Mode    string         `json:"mode"`
	Workers int            `json:"workers"`
	Scale   msgDirectScale `json:"scale"`
	Sent    int            `json:"sent"`
	Acked   int            `json:"acked"`
	Errors  int            `json:"errors"`
	// FirstError is the first Send error, if any.
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
	MsgsPerSec float64 `json:"msgs_per_s"`
	// AckMs is Send's latency: from the call to the recipient's ack
	// arriving back; OneWayMs from the call to the recipient's receipt.
	AckMs    dist `json:"ack_ms"`
	OneWayMs dist `json:"one_way_ms"`
	// Delivered counts distinct messages B received; Lost acked ones it
	// never received (must be 0); Unacked delivered ones whose Send failed.
	Delivered  int `json:"delivered"`
	Duplicates int `json:"duplicates"`
	Lost       int `json:"lost"`
	Unacked    int `json:"delivered_unacked"`
	// Relayed is how many messages A's supernode relayed to B's in the
	// window (overlayd_supernode_direct_messages_total{outcome="relayed"}):
	// each must cross supernodes.
	Relayed int64 `json:"relayed"`
}

// msgDirectRecv collects B's deliveries, keyed by message index.
type msgDirectRecv struct {
	mu  sync.Mutex
	got map[uint64]time.Duration // index → one-way latency
	dup int
}

// BenchmarkDirectMessage measures direct messages across two supernodes:
// client A is attached to supernode 0 and client B to supernode 1 (their
// identities are drawn until each one's home cluster starts there), and A
// sends to B with Node.Send, which returns when B's end-to-end ack is back
// (A → sn0 → sn1 → B, ack B → sn1 → sn0 → A). Sub-benchmarks:
//
//	mode=sequential  one goroutine, one Send after another
//	mode=concurrent  8 goroutines, each one Send after another
//
// for 5 s each (1 s under -short, at most 20,000 messages per goroutine).
// Reported: messages acked per second, Send latency (call → ack) and
// one-way latency (call → B's receipt) p50/p99; every acked message must
// reach B exactly once (b.Error otherwise). The network is shared by the
// sub-benchmarks of one BenchmarkDirectMessage run. With
// OVERLAYD_REPORT_DIR set, reports go to msg-direct-<mode>.json and
// msg-runs.jsonl.
func BenchmarkDirectMessage(b *testing.B) {
	sc := msgDirectScale{Window: 5 * time.Second, MaxPerWorker: 20000, Concurrency: 8}
	if testing.Short() {
		sc = msgDirectScale{Window: time.Second, MaxPerWorker: 2000, Concurrency: 8, Short: true}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	net := msgStartSupernodes(ctx, b, 2, 10, time.Second, msgSeed+500, msgSeed+600, false)
	rg := net.sns[0].Ring()
	want := []peer.ID{net.sns[0].ID(), net.sns[1].ID()}
	keys := make([]crypto.PrivKey, 2)
	for i := range keys {
		keys[i] = msgKeyHomedAt(b, rg, want[i])
	}
	cs := net.startClients(ctx, b, keys)
	msgWaitAttached(ctx, b, cs, want, 30*time.Second)
	a, rcv := cs[0], cs[1]
	l := rcv.Client().Listen()
	recv := &msgDirectRecv{got: map[uint64]time.Duration{}}
	t0 := time.Now()
	stop := make(chan struct{})
	var dwg sync.WaitGroup
	msgWithRole(ctx, msgRoleHarness, func(context.Context) {
		dwg.Go(func() {
			defer l.Close()
			for {
				select {
				case <-stop:
					return
				case in := <-l.C:
					sent, idx, ok := msgParsePayload(in.Payload)
					if in.Kind != "direct" || !ok {
						continue
					}
					recv.mu.Lock()
					if _, dup := recv.got[idx]; dup {
						recv.dup++
					} else {
						recv.got[idx] = in.Time.Sub(t0) - sent
					}
					recv.mu.Unlock()
				}
			}
		})
	})
	defer func() { close(stop); dwg.Wait() }()
	// One message first, so that the relay link and route cache exist.
	if _, err := a.Client().Send(ctx, rcv.ID(), msgPayload(0, math.MaxUint64)); err != nil {
		b.Fatalf("warm-up send: %v", err)
	}
	var run atomic.Uint64
	for _, mode := range []struct {
		name    string
		workers int
	}{{"sequential", 1}, {"concurrent", sc.Concurrency}} {
		b.Run("mode="+mode.name, func(b *testing.B) {
			var r *msgDirectReport
			for range b.N {
				before := msgReadRouter(net.regs[0])
				r = msgRunDirect(ctx, b, sc, mode.name, mode.workers, run.Add(1), a, rcv.ID(), t0, recv)
				r.Relayed = int64(msgReadRouter(net.regs[0]).Relayed - before.Relayed)
				writeReport(b, "msg-runs.jsonl", "msg-direct-"+mode.name+".json", r)
				b.Logf("mode=%s workers=%d: %d sent, %d acked, %d errors %s in %.2f s: %.0f msgs/s; ack p50 %.3f p90 %.3f p99 %.3f max %.2f ms; one-way p50 %.3f p99 %.3f ms; delivered %d, lost %d, unacked %d, relayed %d",
					r.Mode, r.Workers, r.Sent, r.Acked, r.Errors, r.FirstError, r.Seconds, r.MsgsPerSec,
					r.AckMs.P50, r.AckMs.P90, r.AckMs.P99, r.AckMs.Max, r.OneWayMs.P50, r.OneWayMs.P99, r.Delivered, r.Lost, r.Unacked, r.Relayed)
				if r.Lost > 0 || r.Duplicates > 0 || r.Errors > 0 {
					b.Errorf("mode=%s: %d acked messages never reached B, %d duplicates, %d send errors (first: %s)", r.Mode, r.Lost, r.Duplicates, r.Errors, r.FirstError)
				}
			}
			b.ReportMetric(r.MsgsPerSec, "msgs/s")
			b.ReportMetric(r.AckMs.P50, "p50-ms")
			b.ReportMetric(r.AckMs.P99, "p99-ms")
			b.ReportMetric(r.OneWayMs.P99, "one-way-p99-ms")
			b.ReportMetric(float64(r.Errors), "errors")
		})
	}
}

// msgKeyHomedAt draws identities until one's home cluster starts at sn.
func msgKeyHomedAt(tb testing.TB, rg *ring.Ring, sn peer.ID) crypto.PrivKey {
	tb.Helper()
	for range 1000 {
		k, id, err := msgKey()
		if err != nil {
			tb.Fatal(err)
		}
		if h := cluster.Home(rg, []byte(id)); len(h) > 0 && h[0] == sn {
			return k
		}
	}
	tb.Fatalf("no identity homed at %s in 1000 draws", sn.ShortString())
	return nil
}

// msgRunDirect sends from a to `to` with the given number of goroutines
// for sc.Window and checks what B received. Message indexes are
// run<<40 | worker<<24 | n, so runs never share one.
func msgRunDirect(ctx context.Context, b *testing.B, sc msgDirectScale, mode string, workers int, run uint64,
	a *node.Node, to peer.ID, t0 time.Time, recv *msgDirectRecv) *msgDirectReport {
	b.Helper()
	r := &msgDirectReport{Mode: mode, Workers: workers, Scale: sc}
	type result struct {
		idx  uint64
		took time.Duration
		err  error
	}
	results := make([][]result, workers)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(sc.Window)
	for w := range workers {
		msgWithRole(ctx, msgRoleClient, func(ctx context.Context) {
			wg.Go(func() {
				for n := 0; n < sc.MaxPerWorker && time.Now().Before(deadline); n++ {
					idx := run<<40 | uint64(w)<<24 | uint64(n)
					s := time.Now()
					_, err := a.Client().Send(ctx, to, msgPayload(s.Sub(t0), idx))
					results[w] = append(results[w], result{idx, time.Since(s), err})
				}
			})
		})
	}
	wg.Wait()
	r.Seconds = time.Since(start).Seconds()
	acked := map[uint64]bool{}
	var took []time.Duration
	for _, rs := range results {
		for _, x := range rs {
			r.Sent++
			if x.err != nil {
				r.Errors++
				if r.FirstError == "" {
					r.FirstError = x.err.Error()
				}
				continue
			}
			r.Acked++
			acked[x.idx] = true
			took = append(took, x.took)
		}
	}
	r.MsgsPerSec = float64(r.Acked) / r.Seconds
	r.AckMs = distMs(took)
	// B acks before it hands a message to its listeners: give the last
	// ones a moment to arrive.
	mine := func() (n int) {
		recv.mu.Lock()
		defer recv.mu.Unlock()
		for idx := range recv.got {
			if idx>>40 == run {
				n++
			}
		}
		return n
	}
	_ = waitFor(ctx, 2*time.Second, 5*time.Millisecond, func() bool { return mine() >= r.Acked })
	recv.mu.Lock()
	defer recv.mu.Unlock()
	var oneWay []time.Duration
	for idx, d := range recv.got {
		if idx>>40 != run {
			continue
		}
		r.Delivered++
		oneWay = append(oneWay, d)
		if !acked[idx] {
			r.Unacked++
		}
	}
	for idx := range acked {
		if _, ok := recv.got[idx]; !ok {
			r.Lost++
		}
	}
	r.Duplicates, recv.dup = recv.dup, 0
	r.OneWayMs = distMs(oneWay)
	return r
}
