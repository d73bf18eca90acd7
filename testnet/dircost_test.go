package testnet

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/node"
	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/overlay/view"
	"github.com/overlayd/overlayd/testnet/dircost"
)

// The in-process testnet's directory cost per node (issue 21), measured
// from the nodes' own counters and set beside the simulator's model
// (dircost.Compute) at the same size, interval and client count.

// Designs of the directory the benchmark compares.
const (
	dcDesignView = "view" // ordinary nodes keep a partial view (the default)
	dcDesignFull = "full" // ordinary nodes on the announcement topic (Config.FullDirectory)
)

// dcParams are the benchmark's settings.
type dcParams struct {
	Sizes     []int         // supernodes
	Clients   int           // ordinary nodes
	Interval  time.Duration // announce interval
	Intervals int           // measured window, in intervals
	Settle    int           // intervals waited after formation, before the window
}

// dcParamsFor reads the settings: OVERLAYD_DIRCOST_SUPERNODES (a comma
// list, default 5,10,20,40), OVERLAYD_DIRCOST_CLIENTS (100),
// OVERLAYD_DIRCOST_INTERVAL (1s) and OVERLAYD_DIRCOST_INTERVALS (10).
func dcParamsFor(b *testing.B) dcParams {
	p := dcParams{Sizes: []int{5, 10, 20, 40}, Clients: 100, Interval: time.Second, Intervals: 10, Settle: 2}
	if s := os.Getenv("OVERLAYD_DIRCOST_SUPERNODES"); s != "" {
		p.Sizes = nil
		for f := range strings.SplitSeq(s, ",") {
			v, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || v < 1 || v > 500 {
				b.Fatalf("OVERLAYD_DIRCOST_SUPERNODES=%q: want a comma list of integers in [1, 500]", s)
			}
			p.Sizes = append(p.Sizes, v)
		}
	}
	envInt(b, "OVERLAYD_DIRCOST_CLIENTS", &p.Clients, 1, 1500)
	envDuration(b, "OVERLAYD_DIRCOST_INTERVAL", 100*time.Millisecond, time.Minute, &p.Interval)
	envInt(b, "OVERLAYD_DIRCOST_INTERVALS", &p.Intervals, 1, 1000)
	return p
}

// dcResult is one run's figures: per-node rates over the window, medians
// (and ranges) over the nodes of each kind.
type dcResult struct {
	Supernodes, Clients int
	Design              string
	FormedS             float64
	WindowS             float64
	// Per ordinary node: directory bytes received a second (topic
	// messages validated + view responses) and signature checks a second
	// (announcements accepted + refused + view entries checked); view
	// fetches a second (refreshes and cross-checks, both results).
	OrdBps, OrdChecks, OrdFetches dist
	OrdBpsMin, OrdChecksMin       float64
	// OrdTopicBytesMax is the most topic bytes an ordinary node validated
	// in the window: 0 with the view.
	OrdTopicBytesMax float64
	// Per supernode: topic bytes and checks a second.
	SnBps, SnChecks       dist
	SnBpsMin, SnChecksMin float64
	// Checks: cross-checks by verdict, view entries refused, summed over
	// the ordinary nodes in the window.
	Verdicts       map[string]float64
	EntriesRefused float64
	CPUCores       float64
	LoadAvg        string
}

// BenchmarkDirectoryCost measures what the directory costs each node of an
// in-process network of real libp2p hosts on 127.0.0.1: S supernodes
// (S in OVERLAYD_DIRCOST_SUPERNODES, default 5, 10, 20, 40; capacity twice
// their share) and N ordinary nodes (OVERLAYD_DIRCOST_CLIENTS, default
// 100), announce interval 1 s (OVERLAYD_DIRCOST_INTERVAL), under both
// designs: design=view (ordinary nodes keep a partial view, node/viewclient)
// and design=full (every ordinary node on the announcement topic,
// Config.FullDirectory). Once the network has formed (every supernode's
// directory complete, every client attached, every client's directory
// complete (full) or refreshed at least once (view), the rings agree) and
// two more intervals have passed, it reads every node's counters, waits
// OVERLAYD_DIRCOST_INTERVALS intervals (default 10), reads them again and
// reports the medians over the nodes of each kind:
//
//	ord-B/s       overlayd_directory_announcement_bytes_total +
//	              overlayd_directory_view_bytes_total, a second
//	ord-checks/s  overlayd_directory_announcements_accepted_total +
//	              _rejected_total (all reasons) +
//	              overlayd_directory_view_entries_total (all results)
//	sn-B/s, sn-checks/s   the same on a supernode (the topic's only)
//
// The parent benchmark then prints a markdown table with the model's
// figures (dircost.Compute at the same S, interval, clients, no megas)
// beside them. Skipped unless OVERLAYD_DIRCOST_NET=1:
//
//	OVERLAYD_DIRCOST_NET=1 go test -run '^$' -bench DirectoryCost -benchtime=1x -count=1 -timeout 30m ./testnet
func BenchmarkDirectoryCost(b *testing.B) {
	if os.Getenv("OVERLAYD_DIRCOST_NET") != "1" {
		b.Skip("set OVERLAYD_DIRCOST_NET=1 to run the directory-cost testnet (minutes)")
	}
	p := dcParamsFor(b)
	var mu sync.Mutex
	var results []dcResult
	for _, s := range p.Sizes {
		for _, design := range []string{dcDesignView, dcDesignFull} {
			b.Run(fmt.Sprintf("S=%d/design=%s", s, design), func(b *testing.B) {
				var r dcResult
				for range b.N {
					r = dcRun(b, p, s, design)
				}
				b.ReportMetric(r.OrdBps.P50, "ord-B/s")
				b.ReportMetric(r.OrdChecks.P50, "ord-checks/s")
				b.ReportMetric(r.SnBps.P50, "sn-B/s")
				b.ReportMetric(r.SnChecks.P50, "sn-checks/s")
				b.ReportMetric(r.FormedS, "formed-s")
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			})
		}
	}
	if len(results) == 0 {
		return
	}
	model, err := dcModel(p)
	if err != nil {
		b.Fatal(err)
	}
	md := dcMarkdown(p, results, model)
	fmt.Print(md)
	if out := os.Getenv("OVERLAYD_DIRCOST_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
			b.Error(err)
		}
	}
}

// dcRun starts one network, lets it form and measures the window.
func dcRun(b *testing.B, p dcParams, supernodes int, design string) dcResult {
	b.Helper()
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+time.Duration(p.Intervals+p.Settle)*p.Interval)
	defer cancel()
	capacity := max(4, int(math.Ceil(2*float64(p.Clients)/float64(supernodes))))
	start := time.Now()
	net, err := Start(ctx, Config{
		Supernodes: supernodes, Clients: p.Clients, Capacity: capacity,
		AnnounceInterval: p.Interval, Keepalive: time.Second, BusyRetryAfter: time.Second,
		RetryBase: 500 * time.Millisecond, RetryMax: 4 * time.Second,
		ReturnInterval: 5 * time.Second, DrainPeriod: 5 * time.Second,
		Seed: 0x64697263 + uint64(supernodes), SingleBootstrap: true, NoGroup: true, Registries: true,
		FullDirectory: design == dcDesignFull,
	})
	if err != nil {
		b.Fatalf("start: %v", err)
	}
	defer net.Close()
	sns, cs := net.Supernodes(), net.Clients()
	if err := waitFor(ctx, 3*time.Minute, 250*time.Millisecond, func() bool { return dcFormed(net, design) }); err != nil {
		a, tot := net.Attached()
		b.Fatalf("S=%d %s: not formed after %v: %d/%d attached, supernode directories complete %v, supernode rings agree %v, all rings agree %v, view homes agree %v (load average %s)",
			supernodes, design, time.Since(start).Round(time.Second), a, tot, Converged(sns, dcIDs(sns)), RingsAgree(sns), RingsAgree(net.All()),
			dcViewHomesAgree(sns[0].Ring(), cs, nil), loadAvg())
	}
	r := dcResult{Supernodes: supernodes, Clients: p.Clients, Design: design, FormedS: time.Since(start).Seconds()}
	pause(ctx, time.Duration(p.Settle)*p.Interval)

	read := func() ([]dcCounters, []dcCounters) {
		return dcReadAll(net, sns), dcReadAll(net, cs)
	}
	b.StartTimer()
	cpu0 := processCPU()
	t0 := time.Now()
	sn0, c0 := read()
	pause(ctx, time.Duration(p.Intervals)*p.Interval)
	sn1, c1 := read()
	win := time.Since(t0).Seconds()
	r.CPUCores = (processCPU() - cpu0).Seconds() / win
	b.StopTimer()
	if ctx.Err() != nil {
		b.Fatalf("S=%d %s: %v", supernodes, design, ctx.Err())
	}
	r.WindowS, r.LoadAvg = win, loadAvg()
	r.Verdicts = map[string]float64{}
	var ordB, ordC, ordF, snB, snC []float64
	for i := range cs {
		d := c1[i].sub(c0[i])
		ordB = append(ordB, (d.topicBytes+d.viewBytes)/d.secs)
		ordC = append(ordC, (d.accepted+d.rejected+d.viewEntries)/d.secs)
		ordF = append(ordF, d.fetches/d.secs)
		r.OrdTopicBytesMax = max(r.OrdTopicBytesMax, d.topicBytes)
		r.EntriesRefused += d.entriesRefused
		for k, v := range d.verdicts {
			r.Verdicts[k] += v
		}
	}
	for i := range sns {
		d := sn1[i].sub(sn0[i])
		snB = append(snB, (d.topicBytes+d.viewBytes)/d.secs)
		snC = append(snC, (d.accepted+d.rejected+d.viewEntries)/d.secs)
	}
	r.OrdBps, r.OrdChecks, r.OrdFetches = distOf(ordB), distOf(ordC), distOf(ordF)
	r.OrdBpsMin, r.OrdChecksMin = slices.Min(ordB), slices.Min(ordC)
	r.SnBps, r.SnChecks = distOf(snB), distOf(snC)
	r.SnBpsMin, r.SnChecksMin = slices.Min(snB), slices.Min(snC)
	b.Logf("S=%d %s: formed in %.1f s; window %.1f s; per ordinary node %.0f B/s (%.0f-%.0f) %.2f checks/s (%.2f-%.2f) %.2f fetches/s, topic bytes max %.0f; "+
		"per supernode %.0f B/s (%.0f-%.0f) %.2f checks/s (%.2f-%.2f); cross-checks %v, entries refused %.0f; process %.2f cores, load average %s",
		supernodes, design, r.FormedS, win, r.OrdBps.P50, r.OrdBpsMin, r.OrdBps.Max, r.OrdChecks.P50, r.OrdChecksMin, r.OrdChecks.Max, r.OrdFetches.P50,
		r.OrdTopicBytesMax, r.SnBps.P50, r.SnBpsMin, r.SnBps.Max, r.SnChecks.P50, r.SnChecksMin, r.SnChecks.Max, r.Verdicts, r.EntriesRefused,
		r.CPUCores, r.LoadAvg)
	return r
}

// dcFormed reports whether the network has formed for design: every
// supernode's directory holds every supernode, every client is attached,
// and every client's directory is complete (full) or holds a view
// refreshed at least once (view); every node's ring has the same version.
func dcFormed(net *Network, design string) bool {
	sns, cs := net.Supernodes(), net.Clients()
	ids := dcIDs(sns)
	if !Converged(sns, ids) {
		return false
	}
	if a, tot := net.Attached(); a != tot {
		return false
	}
	if design == dcDesignFull {
		return Converged(cs, ids) && RingsAgree(net.All())
	}
	if !RingsAgree(sns) {
		return false
	}
	return dcViewHomesAgree(sns[0].Ring(), cs, func(c *node.Node) bool { return dcRead(net.Registry(c)).refreshes >= 1 })
}

// dcViewHomesAgree reports whether every ordinary node of nodes has a ring
// and its home cluster for its own key on that ring is the one r (a
// supernode's) gives, and ready (if not nil) holds for it. A node on a
// partial view holds a ring of its view's members only, whose version
// differs from the supernodes' (ring.Version hashes the member set), so
// RingsAgree cannot hold for it: the home cluster is what it must agree on.
func dcViewHomesAgree(r *ring.Ring, nodes []*node.Node, ready func(*node.Node) bool) bool {
	if r == nil {
		return false
	}
	for _, c := range nodes {
		cr := c.Ring()
		if cr == nil || ready != nil && !ready(c) {
			return false
		}
		key := []byte(c.ID())
		if !slices.Equal(cluster.Home(cr, key), cluster.Home(r, key)) {
			return false
		}
	}
	return true
}

func dcIDs(nodes []*node.Node) []peer.ID {
	var ids []peer.ID
	for _, nd := range nodes {
		ids = append(ids, nd.ID())
	}
	return ids
}

// dcCounters are one node's directory counters at one instant.
type dcCounters struct {
	at                              time.Time
	secs                            float64 // in a difference (sub): the seconds between the two readings
	topicBytes, accepted, rejected  float64
	viewBytes, viewEntries, fetches float64
	refreshes, entriesRefused       float64
	verdicts                        map[string]float64
}

func (c dcCounters) sub(o dcCounters) dcCounters {
	d := dcCounters{at: c.at, secs: c.at.Sub(o.at).Seconds(), topicBytes: c.topicBytes - o.topicBytes, accepted: c.accepted - o.accepted, rejected: c.rejected - o.rejected,
		viewBytes: c.viewBytes - o.viewBytes, viewEntries: c.viewEntries - o.viewEntries, fetches: c.fetches - o.fetches,
		refreshes: c.refreshes - o.refreshes, entriesRefused: c.entriesRefused - o.entriesRefused, verdicts: map[string]float64{}}
	for k, v := range c.verdicts {
		d.verdicts[k] = v - o.verdicts[k]
	}
	return d
}

func dcReadAll(net *Network, nodes []*node.Node) []dcCounters {
	out := make([]dcCounters, len(nodes))
	for i, nd := range nodes {
		out[i] = dcRead(net.Registry(nd))
	}
	return out
}

// dcRead reads the directory counters of one node's registry, summing a
// labelled counter over its labels.
func dcRead(reg *prometheus.Registry) dcCounters {
	c := dcCounters{at: time.Now(), verdicts: map[string]float64{}}
	if reg == nil {
		return c
	}
	mfs, err := reg.Gather()
	if err != nil {
		return c
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.GetCounter() == nil {
				continue
			}
			v := m.GetCounter().GetValue()
			label := map[string]string{}
			for _, l := range m.GetLabel() {
				label[l.GetName()] = l.GetValue()
			}
			switch mf.GetName() {
			case "overlayd_directory_announcement_bytes_total":
				c.topicBytes += v
			case "overlayd_directory_announcements_accepted_total":
				c.accepted += v
			case "overlayd_directory_announcements_rejected_total":
				c.rejected += v
			case "overlayd_directory_view_bytes_total":
				c.viewBytes += v
			case "overlayd_directory_view_entries_total":
				c.viewEntries += v
				if label["result"] != "accepted" {
					c.entriesRefused += v
				}
			case "overlayd_directory_view_fetches_total":
				c.fetches += v
				if label["purpose"] == "refresh" && label["result"] == "ok" {
					c.refreshes += v
				}
			case "overlayd_directory_view_checks_total":
				c.verdicts[label["verdict"]] += v
			}
		}
	}
	return c
}

// dcModel runs dircost.Compute at the sizes the model can take (a view
// needs view.Neighbours + view.Spares supernodes: the model refuses
// fewer), with the testnet's interval, clients and no megas. Latencies
// are loopback's; the heartbeat is node's gossipParams' at the interval.
func dcModel(p dcParams) (map[int][2]dircost.Row, error) {
	mp := dircost.DefaultParams()
	mp.Base = p.Interval
	mp.Intervals = p.Intervals
	mp.Clients = p.Clients
	mp.Megas = 0
	mp.LatencyMin, mp.LatencyMax = 50*time.Microsecond, 500*time.Microsecond
	mp.Heartbeat = min(max(p.Interval/4, 100*time.Millisecond), time.Second)
	out := map[int][2]dircost.Row{}
	for _, s := range p.Sizes {
		if s < view.Neighbours+view.Spares {
			continue
		}
		mp.ClientsPerSupernode = max(1, p.Clients/s)
		rows, err := dircost.Compute([]int{s}, mp)
		if err != nil {
			return nil, err
		}
		out[s] = [2]dircost.Row{rows[0], rows[1]}
	}
	return out, nil
}

// dcMarkdown is the table of the real figures beside the model's: the
// testnet's full design against the model's today, its view against the
// model's view.
func dcMarkdown(p dcParams, rs []dcResult, model map[int][2]dircost.Row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d ordinary nodes, announce interval %v, window %d intervals; testnet: medians over the nodes (range); model: dircost.Compute (no megas)\n\n",
		p.Clients, p.Interval, p.Intervals)
	b.WriteString("| supernodes | design | ordinary B/s testnet (range) | model | ordinary checks/s testnet (range) | model | supernode topic B/s testnet (range) | model, once per message | model, all copies + IHAVE + views | supernode checks/s testnet | model | formed in | process cores |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		m, ok := model[r.Supernodes]
		var row dircost.Row
		if ok {
			row = m[1]
			if r.Design == dcDesignFull {
				row = m[0]
			}
		}
		f := func(v float64, prec int) string {
			if !ok {
				return "n/a"
			}
			return strconv.FormatFloat(v, 'f', prec, 64)
		}
		once := 0.0
		if row.Copies > 0 {
			once = row.GossipBps / row.Copies
		}
		fmt.Fprintf(&b, "| %d | %s | %.0f (%.0f–%.0f) | %s | %.2f (%.2f–%.2f) | %s | %.0f (%.0f–%.0f) | %s | %s | %.2f (%.2f–%.2f) | %s | %.1f s | %.2f |\n",
			r.Supernodes, r.Design, r.OrdBps.P50, r.OrdBpsMin, r.OrdBps.Max, f(row.OrdinaryBps, 0),
			r.OrdChecks.P50, r.OrdChecksMin, r.OrdChecks.Max, f(row.OrdinaryChecks, 2),
			r.SnBps.P50, r.SnBpsMin, r.SnBps.Max, f(once, 0), f(row.SupernodeBps, 0),
			r.SnChecks.P50, r.SnChecksMin, r.SnChecks.Max, f(row.SupernodeChecks, 2), r.FormedS, r.CPUCores)
	}
	return b.String()
}
