package scenario

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/overlayd/overlayd/testnet"
	"github.com/overlayd/overlayd/testnet/report"
)

// Scenario is one named script of actions on a network, with the pass
// criteria that the runner checks.
type Scenario struct {
	Name    string
	Summary string
	// Adjust, if not nil, adapts the network's configuration to the
	// scenario (for example a wider first-pass stagger for the storm).
	Adjust func(*testnet.Config)
	run    func(*Runner) error
}

// All lists the scenarios, the tour first.
func All() []Scenario {
	return []Scenario{
		{Name: "tour", Summary: "form, message, crash 60% of the supernodes, promote the megas, restart, hand back, message again: the whole system in one run", run: runTour},
		{Name: "steady", Summary: "form, attach every client, send group and direct messages: nothing lost, nothing duplicated", run: runSteady},
		{Name: "churn", Summary: "clients join and leave at a steady rate: every live client attached, rings agree", run: runChurn},
		{Name: "outage", Summary: "crash 30% of the supernodes at once: clients re-attach in bounded time, no supernode over capacity", run: runOutage},
		{Name: "storm", Summary: "every client drops its session and reconnects in the same instant: refusals answered, the wave spread, no collapse",
			Adjust: func(c *testnet.Config) { c.RetryBase = max(c.RetryBase, time.Second) }, run: runStorm},
		{Name: "recovery", Summary: "crash 60% of the supernodes (more than the rest can carry), promote the mega-supernodes, restart, hand back", run: runRecoveryScenario},
		{Name: "partition", Summary: "split the network in two and heal it: both sides keep serving, rings agree again", run: runPartition},
	}
}

// Names lists the scenarios' names.
func Names() []string {
	var out []string
	for _, s := range All() {
		out = append(out, s.Name)
	}
	return out
}

// Find returns the named scenario.
func Find(name string) (Scenario, error) {
	for _, s := range All() {
		if s.Name == name {
			return s, nil
		}
	}
	return Scenario{}, fmt.Errorf("scenario: unknown scenario %q (have: %s)", name, strings.Join(Names(), ", "))
}

// Progress is the network's state as the runner reports it live.
type Progress struct {
	Phase string
	report.Sample
	// Event is set when the scenario just acted on the network.
	Event *report.Event
}

// RunConfig is one run of a scenario.
type RunConfig struct {
	testnet.Config
	Scenario string
	// SampleEvery is the sampling period (default 250 ms).
	SampleEvery time.Duration
	// Progress, if not nil, is called with every sample and event, from
	// the runner's goroutines, one call at a time.
	Progress func(Progress)
	// Version is overlayd's version, for the report.
	Version string
}

// Runner is one scenario run in progress: the network, the samples and the
// verdicts so far.
type Runner struct {
	ctx context.Context
	Net *testnet.Network
	cfg RunConfig

	mu       sync.Mutex
	phase    string
	report   *report.Report
	progress func(Progress)
}

// Run starts a network, runs the scenario on it, checks its pass
// criteria and returns the report. An error means the run could not be
// carried out (a node did not start, the context ended); failed criteria
// are in the report, with Passed false.
func Run(ctx context.Context, rc RunConfig) (*report.Report, error) {
	sc, err := Find(rc.Scenario)
	if err != nil {
		return nil, err
	}
	if sc.Adjust != nil {
		sc.Adjust(&rc.Config)
	}
	if err := rc.Config.Validate(); err != nil {
		return nil, err
	}
	if rc.SampleEvery <= 0 {
		rc.SampleEvery = 250 * time.Millisecond
	}
	r := &Runner{ctx: ctx, cfg: rc, phase: "start", progress: rc.Progress}
	r.report = &report.Report{
		Schema: report.Schema, Scenario: sc.Name, Seed: rc.Seed, Versions: versions(rc.Version),
		Config: report.Sizes{Supernodes: rc.Supernodes, Clients: rc.Clients, Megas: rc.Megas, Capacity: rc.Capacity,
			AnnounceIntervalSeconds: rc.AnnounceInterval.Seconds(), KeepaliveSeconds: rc.Keepalive.Seconds()},
		Figures: map[string]float64{}, Criteria: []report.Criterion{}, Events: []report.Event{}, Samples: []report.Sample{},
	}
	start := time.Now()
	net, err := testnet.Start(ctx, rc.Config)
	if err != nil {
		return nil, err
	}
	defer net.Close()
	r.Net = net
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { r.sampleLoop(sampleCtx) })
	err = sc.run(r)
	stopSampling()
	wg.Wait()
	r.sample()
	r.report.DurationSeconds = time.Since(start).Seconds()
	r.report.Passed = len(r.report.Criteria) > 0
	for _, c := range r.report.Criteria {
		r.report.Passed = r.report.Passed && c.Pass
	}
	if err != nil {
		return r.report, err
	}
	return r.report, nil
}

// versions names overlayd's, Go's and go-libp2p's versions.
func versions(overlayd string) report.Versions {
	v := report.Versions{Overlayd: overlayd, Go: runtime.Version(), Libp2p: "unknown"}
	if v.Overlayd == "" {
		v.Overlayd = "dev"
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/libp2p/go-libp2p" {
				v.Libp2p = d.Version
			}
		}
	}
	return v
}

func (r *Runner) sampleLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.SampleEvery)
	defer t.Stop()
	for {
		r.sample()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sample records the network's state and reports it.
func (r *Runner) sample() {
	s := r.Net.Sample()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.report.Samples = append(r.report.Samples, s)
	if r.progress != nil {
		r.progress(Progress{Phase: r.phase, Sample: s})
	}
}

// Phase names what the scenario does now, for the live progress.
func (r *Runner) Phase(name string) {
	r.mu.Lock()
	r.phase = name
	r.mu.Unlock()
}

// Event records an action on the network.
func (r *Runner) Event(kind, detail string) {
	e := report.Event{T: r.Net.Elapsed().Seconds(), Kind: kind, Detail: detail}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.report.Events = append(r.report.Events, e)
	if r.progress != nil {
		r.progress(Progress{Phase: r.phase, Sample: r.lastSample(), Event: &e})
	}
}

func (r *Runner) lastSample() report.Sample {
	if n := len(r.report.Samples); n > 0 {
		return r.report.Samples[n-1]
	}
	return report.Sample{}
}

// Check records a pass criterion.
func (r *Runner) Check(name, want, got string, pass bool) {
	r.mu.Lock()
	r.report.Criteria = append(r.report.Criteria, report.Criterion{Name: name, Want: want, Got: got, Pass: pass})
	r.mu.Unlock()
}

// Figure records a measurement.
func (r *Runner) Figure(name string, v float64) {
	r.mu.Lock()
	r.report.Figures[name] = v
	r.mu.Unlock()
}

// Report returns the report so far.
func (r *Runner) Report() *report.Report { return r.report }

// samplesSince returns the samples taken from t (seconds) on.
func (r *Runner) samplesSince(t float64) []report.Sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, _ := slices.BinarySearchFunc(r.report.Samples, t, func(s report.Sample, t float64) int {
		switch {
		case s.T < t:
			return -1
		case s.T > t:
			return 1
		}
		return 0
	})
	return slices.Clone(r.report.Samples[i:])
}

// now is seconds since the network started.
func (r *Runner) now() float64 { return r.Net.Elapsed().Seconds() }

// within bounds a wait of the scenario.
func (r *Runner) within(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.ctx, d)
}

// --- steps shared by scenarios ---

// formLimit is how long a network may take to form: 30 s, plus 50 ms per
// node beyond a hundred (a thousand-node network takes tens of seconds on
// two cores).
func (r *Runner) formLimit() time.Duration {
	nodes := r.cfg.Supernodes + r.cfg.Megas + r.cfg.Clients
	return 30*time.Second + time.Duration(max(0, nodes-100))*50*time.Millisecond
}

// form waits until the directories converge and every client is attached,
// and checks it happened within limit.
func (r *Runner) form(limit time.Duration) {
	r.Phase("forming")
	t0 := time.Now()
	ctx, cancel := r.within(limit)
	defer cancel()
	err := r.Net.WaitConverged(ctx, nil)
	if err == nil {
		err = r.Net.WaitAttached(ctx, nil)
	}
	took := time.Since(t0)
	r.Figure("form_seconds", took.Seconds())
	// The process holds nothing but the network: its heap is the nodes'.
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	nodes := len(r.Net.All())
	r.Figure("heap_mib_formed", float64(ms.HeapInuse)/(1<<20))
	r.Figure("heap_kib_per_node_formed", float64(ms.HeapInuse)/1024/float64(max(1, nodes)))
	r.Figure("goroutines_formed", float64(runtime.NumGoroutine()))
	a, tot := r.Net.Attached()
	r.Check("network formed", fmt.Sprintf("every directory complete, rings agree, all clients attached within %v", limit),
		fmt.Sprintf("%d/%d attached after %v", a, tot, took.Round(10*time.Millisecond)), err == nil)
}

// messages publishes groups group messages and sends directs direct ones,
// then waits until every member received every group message. It checks
// delivery (exactly once, in order) and returns whether it held.
func (r *Runner) messages(label string, groups, directs int, limit time.Duration) bool {
	r.Phase("messaging " + label)
	before := r.Net.Counters()
	members := len(r.Net.Clients())
	ctx, cancel := r.within(limit)
	defer cancel()
	// The group's home learns of every member with its join; wait until
	// it knows them all, so that "every member" is well defined.
	homeKnows, _ := r.Net.WaitHomeKnows(ctx)
	var sendErrs []error
	published, acked := 0, 0
	for i := range groups {
		if err := r.Net.Publish(ctx, fmt.Sprintf("%s group %d", label, i)); err != nil {
			sendErrs = append(sendErrs, err)
		} else {
			published++
		}
	}
	for i := range directs {
		if err := r.Net.SendDirect(ctx, fmt.Sprintf("%s direct %d", label, i)); err != nil {
			sendErrs = append(sendErrs, err)
		} else {
			acked++
		}
	}
	want := uint64(published*members + acked)
	_ = poll(ctx, 20*time.Millisecond, func() bool { return r.Net.Counters().Delivered-before.Delivered >= want })
	after := r.Net.Counters()
	got := after.Delivered - before.Delivered
	dups, ooo := after.Duplicates-before.Duplicates, after.OutOfOrder-before.OutOfOrder
	ok := len(sendErrs) == 0 && got == uint64(groups*members+directs) && dups == 0 && ooo == 0
	detail := fmt.Sprintf("%d/%d deliveries, %d duplicates, %d out of order, home knew %d/%d members",
		got, groups*members+directs, dups, ooo, homeKnows, members)
	if len(sendErrs) > 0 {
		detail += fmt.Sprintf(", %d sends failed (first: %v)", len(sendErrs), sendErrs[0])
	}
	r.Check("messages delivered "+label,
		fmt.Sprintf("%d group messages to each of %d members and %d direct messages, each exactly once and in order, within %v", groups, members, directs, limit),
		detail, ok)
	return ok
}

// reattach waits until every client is attached again and records how long
// it took after the given moment.
func (r *Runner) reattach(label string, since time.Time, limit time.Duration) {
	ctx, cancel := r.within(limit)
	defer cancel()
	err := r.Net.WaitAttached(ctx, nil)
	took := time.Since(since)
	r.Figure(label+"_reattach_seconds", took.Seconds())
	a, tot := r.Net.Attached()
	r.Check("clients re-attached after "+label, fmt.Sprintf("all within %v", limit),
		fmt.Sprintf("%d/%d after %v", a, tot, took.Round(10*time.Millisecond)), err == nil)
}

// capacityHeld checks that no regular supernode ever held more clients
// than its capacity in the samples from t on (a mega's own certificate
// capacity is checked the same way while it is a mega).
func (r *Runner) capacityHeld(from float64) {
	worst, where := 0.0, "none"
	for _, s := range r.samplesSince(from) {
		for _, l := range s.Load {
			if l.Capacity == 0 || strings.HasPrefix(l.Name, "mega") && !l.Mega {
				continue // a demoted mega hands back over the drain period
			}
			if f := float64(l.Attached) / float64(l.Capacity); f > worst {
				worst, where = f, fmt.Sprintf("%s %d/%d at %.1fs", l.Name, l.Attached, l.Capacity, s.T)
			}
		}
	}
	r.Figure("max_load_fraction", worst)
	r.Check("no supernode over capacity", "attached ≤ capacity in every sample",
		fmt.Sprintf("highest %.0f%% (%s)", 100*worst, where), worst <= 1)
}

// lossEvery is the loss publisher's period, and lossRetry how long it
// retries one publish (with the same ID) before giving it up.
const (
	lossEvery = 50 * time.Millisecond
	lossRetry = 20 * time.Second
)

// startLoss starts the loss publisher, on a client of sn0 (which no
// scenario kills) where there is one, once the group's home knows every
// member, and waits until it has ten publishes acknowledged; nil if the
// network has no client.
func (r *Runner) startLoss() *testnet.Publisher {
	cs := r.Net.Clients()
	if len(cs) == 0 {
		return nil
	}
	from := cs[0]
	if sns := r.Net.Supernodes(); len(sns) > 0 {
		for _, c := range cs {
			if a := c.Status().Attachment; a != nil && a.Supernode == sns[0].ID().String() {
				from = c
				break
			}
		}
	}
	ctx, cancel := r.within(20 * time.Second)
	defer cancel()
	_, _ = r.Net.WaitHomeKnows(ctx)
	r.Phase("publishing from " + r.Net.Name(from))
	p := r.Net.StartPublisher(r.ctx, from, lossEvery, lossRetry)
	r.lossMore(p, 10)
	return p
}

// lossMore waits (bounded) until p has k more publishes acknowledged.
func (r *Runner) lossMore(p *testnet.Publisher, k int) {
	if p == nil {
		return
	}
	want := len(p.Acked()) + k
	ctx, cancel := r.within(lossRetry)
	defer cancel()
	_ = poll(ctx, 10*time.Millisecond, func() bool { return len(p.Acked()) >= want })
}

// checkLoss stops the loss publisher after ten more acknowledged
// publishes, waits (bounded) until every member delivered every
// acknowledged one, and checks each did so exactly once and in order.
func (r *Runner) checkLoss(p *testnet.Publisher) {
	if p == nil {
		return
	}
	r.lossMore(p, 10)
	p.Stop()
	r.Phase("loss check")
	acked, st := p.Acked(), p.Stats()
	ctx, cancel := r.within(15 * time.Second)
	defer cancel()
	_ = r.Net.WaitDelivered(ctx, acked)
	ml := r.Net.Loss(acked)
	t := testnet.Totals(ml)
	r.Figure("loss_published", float64(len(acked)))
	r.Figure("loss_lost", float64(t.Lost))
	r.Figure("loss_duplicates", float64(t.Duplicates))
	r.Figure("loss_out_of_order", float64(t.OutOfOrder))
	r.Figure("loss_gap_notices", float64(t.Gaps))
	r.Figure("loss_retried", float64(st.Retried))
	r.Figure("loss_given_up", float64(st.Failed))
	r.Check("no message lost with publishing throughout",
		"every acknowledged publish of a client publishing throughout delivered to every member exactly once and in order",
		fmt.Sprintf("N=%d acknowledged to %d members: %d lost, %d duplicates, %d out of order; %d gap notices, %d acknowledged after a retry, %d given up",
			len(acked), t.Members, t.Lost, t.Duplicates, t.OutOfOrder, t.Gaps, st.Retried, st.Failed)+lossDetail(ml, acked),
		len(acked) > 0 && t.Lost == 0 && t.Duplicates == 0 && t.OutOfOrder == 0)
}

// lossDetail names, for a failed loss check, the members that lost,
// duplicated or reordered publishes, with the first lost one's place in
// publish order and the home's stamp on it (at most 8 members), so
// that a failure says which publish to look for in the nodes' logs.
func lossDetail(ms []testnet.MemberLoss, acked []testnet.Acked) string {
	var b strings.Builder
	n := 0
	for _, m := range ms {
		if m.Lost == 0 && m.Duplicates == 0 && m.OutOfOrder == 0 {
			continue
		}
		if n++; n > 8 {
			b.WriteString("; …")
			break
		}
		fmt.Fprintf(&b, "; %s: %d lost, %d duplicates, %d out of order", m.Name, m.Lost, m.Duplicates, m.OutOfOrder)
		if m.FirstLost >= 0 {
			a := acked[m.FirstLost]
			fmt.Fprintf(&b, ", first lost #%d (id %x, stamped epoch %d seq %d)", m.FirstLost, a.ID, a.Epoch, a.Seq)
		}
	}
	return b.String()
}

// --- scenarios ---

func runSteady(r *Runner) error {
	r.form(r.formLimit())
	r.messages("steady", 10, 10, 20*time.Second)
	r.capacityHeld(0)
	return r.ctx.Err()
}

// runTour is the README's main command: the recovery story with
// messages before, during and after, so every part of the system shows.
func runTour(r *Runner) error {
	if r.cfg.Megas < 1 {
		// Without megas the tour is an outage and a restart.
		r.form(r.formLimit())
		r.messages("before the outage", 5, 5, 20*time.Second)
		pub := r.startLoss()
		if err := outage(r, 0.3); err != nil {
			pub.Stop()
			return err
		}
		r.checkLoss(pub)
		r.messages("after the outage", 5, 5, 20*time.Second)
		if err := restart(r); err != nil {
			return err
		}
		r.capacityHeld(0)
		return r.ctx.Err()
	}
	return recovery(r, true)
}

// restart starts the killed supernodes again and checks they rejoin.
func restart(r *Runner) error {
	r.Phase("restart")
	names, err := r.Net.RestartSupernodes(r.ctx)
	if err != nil {
		return err
	}
	r.Event(report.EventRestart, strings.Join(names, " "))
	ctx, cancel := r.within(30 * time.Second)
	defer cancel()
	err = r.Net.WaitConverged(ctx, nil)
	r.Check("restarted supernodes rejoin", "every directory lists them again and rings agree within 30s", errText(err), err == nil)
	return nil
}

func errText(err error) string {
	if err == nil {
		return "yes"
	}
	return err.Error()
}

// outage kills a fraction of the supernodes and checks re-attachment.
func outage(r *Runner, frac float64) error {
	r.Phase("outage")
	t := time.Now()
	names := r.Net.KillSupernodes(frac)
	r.Event(report.EventKill, strings.Join(names, " "))
	r.Figure("supernodes_killed", float64(len(names)))
	// A client notices a dead supernode within its keepalive bound (three
	// missed keepalives) and then re-attaches with a stagger.
	r.reattach("outage", t, 10*r.cfg.Keepalive+10*time.Second)
	return r.ctx.Err()
}

func runOutage(r *Runner) error {
	r.form(r.formLimit())
	pub := r.startLoss()
	if err := outage(r, 0.3); err != nil {
		pub.Stop()
		return err
	}
	r.checkLoss(pub)
	r.messages("after the outage", 5, 5, 20*time.Second)
	r.capacityHeld(0)
	return r.ctx.Err()
}

func runChurn(r *Runner) error {
	r.form(r.formLimit())
	r.Phase("churn")
	from := r.now()
	const rounds = 16
	every := 500 * time.Millisecond
	joined, left := 0, 0
	t := time.NewTicker(every)
	defer t.Stop()
	for i := range rounds {
		if i%2 == 0 {
			if err := r.Net.AddClients(r.ctx, 1); err != nil {
				return err
			}
			joined++
			r.Event(report.EventJoin, "1 client")
		} else {
			names := r.Net.RemoveClients(1)
			left += len(names)
			r.Event(report.EventLeave, strings.Join(names, " "))
		}
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-t.C:
		}
	}
	r.Figure("churn_joined", float64(joined))
	r.Figure("churn_left", float64(left))
	r.Phase("settling")
	r.reattach("churn", time.Now(), 15*time.Second)
	ctx, cancel := r.within(15 * time.Second)
	defer cancel()
	err := poll(ctx, 20*time.Millisecond, func() bool { return testnet.RingsAgree(r.Net.All()) })
	r.Check("rings agree after churn", "every live node has the same ring version within 15s", errText(err), err == nil)
	r.capacityHeld(from)
	return r.ctx.Err()
}

func runStorm(r *Runner) error {
	r.form(r.formLimit())
	r.Phase("storm")
	from := r.now()
	opened, err := r.Net.Storm(r.ctx)
	if err != nil {
		return err
	}
	r.Event(report.EventStorm, fmt.Sprintf("%d clients reconnect at once", len(r.Net.Clients())))
	r.reattach("storm", opened, 30*time.Second)
	st := r.Net.Attempts(opened, 100*time.Millisecond)
	clients := len(r.Net.Clients())
	r.Figure("storm_attempts", float64(st.Attempts))
	r.Figure("storm_unanswered", float64(st.Failed))
	r.Figure("storm_peak_100ms", float64(st.Peak))
	r.Check("refusals answered", "at most 5% of attach attempts end without an answer (accept, busy or redirect)",
		fmt.Sprintf("%d of %d unanswered", st.Failed, st.Attempts), st.Failed*20 <= st.Attempts)
	// Jittered clients spread the wave over their first-pass stagger; a
	// naive client population arrives as one wave.
	limit := max(3, clients/2)
	r.Check("reconnect wave spread", fmt.Sprintf("at most %d attempts (half the clients) in any 100 ms", limit),
		fmt.Sprintf("peak %d in 100 ms", st.Peak), st.Peak <= limit)
	r.capacityHeld(from)
	return r.ctx.Err()
}

func runRecoveryScenario(r *Runner) error { return recovery(r, false) }

// recovery crashes more supernodes than the rest can carry, promotes the
// megas, restarts the crashed ones and hands back; tour adds messages
// before and after.
func recovery(r *Runner, tour bool) error {
	if r.cfg.Megas < 1 {
		return errors.New("testnet: the recovery scenario needs --megas of at least 1")
	}
	r.form(r.formLimit())
	if tour {
		r.messages("before the outage", 5, 5, 20*time.Second)
	}
	// The loss publisher runs from before the crash until after the
	// hand-back; the message checks between count only their own.
	pub := r.startLoss()
	defer pub.Stop()
	r.Phase("outage")
	t := time.Now()
	names := r.Net.KillSupernodes(0.6)
	r.Event(report.EventKill, strings.Join(names, " "))
	megas, err := r.Net.PromoteMegas(r.ctx)
	if err != nil {
		return err
	}
	r.Event(report.EventPromote, strings.Join(megas, " "))
	r.reattach("outage with megas", t, 10*r.cfg.Keepalive+15*time.Second)
	megaPeak := 0
	for _, s := range append(r.samplesSince(0), r.Net.Sample()) {
		for _, l := range s.Load {
			if l.Mega {
				megaPeak = max(megaPeak, l.Attached)
			}
		}
	}
	r.Figure("mega_peak_clients", float64(megaPeak))
	spare := 0
	for _, l := range r.Net.Sample().Load {
		if !strings.HasPrefix(l.Name, "mega") {
			spare += l.Capacity
		}
	}
	r.Check("megas carried the overflow", "the surviving supernodes alone are too small, and the megas hold clients",
		fmt.Sprintf("survivors' capacity %d for %d clients; megas held up to %d", spare, len(r.Net.Clients()), megaPeak),
		spare < len(r.Net.Clients()) && megaPeak > 1)
	r.messages("during the outage", 5, 5, 20*time.Second)
	if err := restart(r); err != nil {
		return err
	}
	r.Phase("hand-back")
	hb := time.Now()
	demoted, err := r.Net.DemoteMegas(r.ctx)
	if err != nil {
		return err
	}
	r.Event(report.EventHandBack, strings.Join(demoted, " "))
	limit := r.cfg.DrainPeriod + 15*time.Second
	ctx, cancel := r.within(limit)
	defer cancel()
	over := func() int {
		worst := 0
		for _, l := range r.Net.Sample().Load {
			if strings.HasPrefix(l.Name, "mega") {
				worst = max(worst, l.Attached-l.Capacity)
			}
		}
		return worst
	}
	err = poll(ctx, 50*time.Millisecond, func() bool { return over() <= 0 })
	r.Figure("handback_seconds", time.Since(hb).Seconds())
	r.Check("megas handed back", fmt.Sprintf("every mega back within its regular capacity within %v", limit),
		fmt.Sprintf("%d over after %v", max(0, over()), time.Since(hb).Round(10*time.Millisecond)), err == nil)
	r.reattach("hand-back", hb, limit)
	r.checkLoss(pub)
	if tour {
		r.messages("after the hand-back", 5, 5, 20*time.Second)
	}
	r.capacityHeld(0)
	return r.ctx.Err()
}

func runPartition(r *Runner) error {
	if r.cfg.Supernodes < 2 {
		return errors.New("testnet: the partition scenario needs at least 2 supernodes")
	}
	r.form(r.formLimit())
	r.Phase("partition")
	t := time.Now()
	r.Net.Partition()
	r.Event(report.EventPartition, "two halves")
	limit := 6*r.cfg.AnnounceInterval + 10*r.cfg.Keepalive + 10*time.Second
	ctx, cancel := r.within(limit)
	defer cancel()
	// Each side's directories drop the other side's supernodes once their
	// announcements stop arriving (three intervals): two networks.
	split := func() bool {
		for _, nd := range r.Net.All() {
			for _, e := range nd.Directory().Snapshot().Entries {
				for _, s := range r.Net.Supernodes() {
					if s.ID() == e.ID && r.Net.Side(s) != r.Net.Side(nd) {
						return false
					}
				}
			}
		}
		return true
	}
	err := poll(ctx, 50*time.Millisecond, split)
	r.Figure("partition_split_seconds", time.Since(t).Seconds())
	r.Check("each side forgets the other", fmt.Sprintf("no directory lists a supernode of the other side within %v", limit),
		fmt.Sprintf("%s after %v", errText(err), time.Since(t).Round(10*time.Millisecond)), err == nil)
	same := func() (ok, total int) {
		for _, c := range r.Net.Clients() {
			total++
			if a := c.Status().Attachment; a != nil {
				for _, s := range r.Net.Supernodes() {
					if s.ID().String() == a.Supernode && r.Net.Side(s) == r.Net.Side(c) {
						ok++
					}
				}
			}
		}
		return ok, total
	}
	err = poll(ctx, 50*time.Millisecond, func() bool { ok, tot := same(); return ok == tot })
	ok, tot := same()
	r.Figure("partition_reattach_seconds", time.Since(t).Seconds())
	r.Check("both sides keep serving", fmt.Sprintf("every client attached on its own side within %v", limit),
		fmt.Sprintf("%d/%d after %v", ok, tot, time.Since(t).Round(10*time.Millisecond)), err == nil)
	sent := 0
	for side := range 2 {
		if r.sendWithinSide(side) {
			sent++
		}
	}
	r.Check("direct messages within each side", "one direct message acknowledged on each side", fmt.Sprintf("%d/2", sent), sent == 2)
	r.Phase("heal")
	h := time.Now()
	r.Net.Heal()
	r.Event(report.EventHeal, "")
	ctx2, cancel2 := r.within(limit)
	defer cancel2()
	err = r.Net.WaitConverged(ctx2, nil)
	r.Figure("heal_converge_seconds", time.Since(h).Seconds())
	r.Check("rings agree after the heal", fmt.Sprintf("every directory complete and rings agree within %v", limit),
		fmt.Sprintf("%s after %v", errText(err), time.Since(h).Round(10*time.Millisecond)), err == nil)
	r.reattach("heal", h, limit)
	r.messages("after the heal", 5, 5, 20*time.Second)
	r.capacityHeld(0)
	return r.ctx.Err()
}

// sendWithinSide sends a direct message between two clients of one side.
func (r *Runner) sendWithinSide(side int) bool {
	var cs []int
	clients := r.Net.Clients()
	for i, c := range clients {
		if r.Net.Side(c) == side {
			cs = append(cs, i)
		}
	}
	if len(cs) < 2 {
		return false
	}
	ctx, cancel := r.within(10 * time.Second)
	defer cancel()
	res, err := clients[cs[0]].Client().Send(ctx, clients[cs[len(cs)-1]].ID(), []byte("within the side"))
	return err == nil && !res.Stored // stored: not delivered within the side
}

// poll calls cond every tick until it holds or ctx ends.
func poll(ctx context.Context, tick time.Duration, cond func() bool) error {
	t := time.NewTicker(tick)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
