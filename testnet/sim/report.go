package sim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Report is a run's outcome: the configuration, the summary and the time
// series. It holds no wall-clock figure, so the same configuration and
// seed give byte-identical JSON.
type Report struct {
	Config  Config  `json:"config"`
	Summary Summary `json:"summary"`
	Series  Series  `json:"series"`
}

// Summary is what the run comes to.
type Summary struct {
	// Orphans are the clients of the supernodes the scenario crashed.
	Orphans int `json:"orphans"`
	// SlotsAfterCrash is the capacity of the live supernodes (megas
	// included) just after the crash.
	SlotsAfterCrash int `json:"slots_after_crash"`
	// TimeTo99 and TimeTo100 are the seconds from the crash until 99% and
	// all of the clients were attached to live supernodes (null: never).
	TimeTo99  *float64 `json:"time_to_99_s"`
	TimeTo100 *float64 `json:"time_to_100_s"`
	// LowestAttached and FinalAttached are fractions of the clients on
	// live supernodes.
	LowestAttached float64 `json:"lowest_attached"`
	FinalAttached  float64 `json:"final_attached"`
	// Crashed by the scenario; Failed by overload afterwards.
	SupernodesCrashed int `json:"supernodes_crashed"`
	SupernodesFailed  int `json:"supernodes_failed"`
	// RegularAlive: regular supernodes alive at the end, and the fewest
	// at any time, as a fraction of those at the start.
	RegularAliveEnd float64 `json:"regular_alive_end"`
	RegularAliveMin float64 `json:"regular_alive_min"`
	// PeakLoad is the highest load / capacity of any regular supernode
	// (its semaphore, at every acquire); AboveCapacity how many regular
	// supernodes were ever above their capacity.
	PeakLoad      float64 `json:"peak_load"`
	AboveCapacity int     `json:"above_capacity"`
	// MegaPeak is the most clients on the megas together.
	MegaPeak int `json:"mega_peak"`
	// Attempts as the clients saw them, and the supernodes' answers.
	Attempts        Counts `json:"attempts"`
	PeakAttempts100 int    `json:"peak_attempts_per_100ms"`
	Events          uint64 `json:"events"`
	// HandBack is the hand-back after the restart (Config.HandBackAt).
	HandBack *HandBack `json:"handback,omitempty"`
	// Auto is the auto tier (the auto-roles scenario).
	Auto *AutoSummary `json:"auto_roles,omitempty"`
}

// HandBack is what the megas' demotion came to.
type HandBack struct {
	// DemotedAt is the demotion, seconds of simulated time.
	DemotedAt float64 `json:"demoted_at_s"`
	// OnMegas at the demotion, and Excess of them above the megas'
	// regular capacity.
	OnMegas int `json:"on_megas_at_demote"`
	Excess  int `json:"excess_at_demote"`
	// Steps are the clients each drain step detached, all megas together
	// (node/role.DrainStep of the excess at that step).
	Steps []int `json:"drain_steps"`
	// TimeToHandedBack is the seconds from the demotion until every
	// client was attached and no ex-mega was above its regular capacity
	// (sampled every 100 ms; null: not within the run).
	TimeToHandedBack *float64 `json:"to_handed_back_s"`
	// LowestAttached after the demotion.
	LowestAttached float64 `json:"lowest_attached"`
}

// Counts are attach attempts by result.
type Counts struct {
	Accept int `json:"accept"`
	Busy   int `json:"busy"`
	Error  int `json:"error"`
}

// Series are the time series. T is seconds of simulated time; every other
// slice is indexed like T, except AttemptsPer100 (one per 100 ms from 0:
// the attempts whose outcome — ACCEPT, BUSY, REDIRECT or failure — reached
// their client in that window, as the testnet counts them). Load is the
// regular supernodes' attached clients over their capacity (quantiles over
// the live ones); MegaLoad the clients on every mega together.
type Series struct {
	T              []float64 `json:"t_s"`
	Attached       []float64 `json:"attached"`
	AliveRegular   []int     `json:"alive_regular"`
	AliveMegas     []int     `json:"alive_megas"`
	LoadMin        []float64 `json:"load_min"`
	LoadP50        []float64 `json:"load_p50"`
	LoadP90        []float64 `json:"load_p90"`
	LoadMax        []float64 `json:"load_max"`
	Capacity       int       `json:"capacity"`
	MegaLoad       []int     `json:"mega_load"`
	MegaCapacity   int       `json:"mega_capacity"`
	AttemptsPer100 []int     `json:"attempts_per_100ms"`
	// AutoServing are the serving auto supernodes (the auto-roles
	// scenario), AutoPromotions and AutoDemotions the role changes so far.
	AutoServing    []int `json:"auto_serving,omitempty"`
	AutoPromotions []int `json:"auto_promotions,omitempty"`
	AutoDemotions  []int `json:"auto_demotions,omitempty"`
}

// recorder collects the report as the run goes.
type recorder struct {
	attachedLive int
	aliveRegular int
	crashAt      int64
	crashDone    bool
	lowest       float64
	t99, t100    *float64
	// watch (clients) and tWatch: the first time after the crash that
	// at least watch clients were attached (the planner's target; 0: not
	// watched). Not in the report.
	watch    int
	tWatch   *float64
	hb       *HandBack
	orphans  int
	slots    int
	crashed  int
	failed   int
	minAlive int
	attempts Counts
	bucket   int
	series   Series
	loads    []float64
}

func (r *recorder) init(s *Sim) {
	r.aliveRegular, r.minAlive, r.lowest = s.cfg.Supernodes, s.cfg.Supernodes, 1
	r.crashAt = int64(s.cfg.CrashAt)
	r.series.Capacity, r.series.MegaCapacity = s.cfg.Capacity, s.cfg.MegaCapacity
	r.series.AttemptsPer100 = make([]int, 0, int(s.cfg.Duration/(100*time.Millisecond))+1)
}

// attached counts a session starting (+1) or ending (-1) on a live
// supernode, and checks the thresholds after the crash.
func (r *recorder) attached(s *Sim, d int) {
	r.attachedLive += d
	if !r.crashDone {
		return
	}
	frac := float64(r.attachedLive) / float64(len(s.clients))
	r.lowest = min(r.lowest, frac)
	if r.hb != nil {
		r.hb.LowestAttached = min(r.hb.LowestAttached, frac)
	}
	since := float64(s.now-r.crashAt) / 1e9
	if r.t99 == nil && 100*r.attachedLive >= 99*len(s.clients) {
		r.t99 = &since
	}
	if r.t100 == nil && r.attachedLive == len(s.clients) {
		r.t100 = &since
	}
	if r.watch > 0 && r.tWatch == nil && r.attachedLive >= r.watch {
		r.tWatch = &since
	}
}

func (r *recorder) supernodeDown(s *Sim, b int32) {
	sn := &s.sns[b]
	r.attached(s, -len(sn.clients))
	if int(b) < s.cfg.Supernodes {
		r.aliveRegular--
		r.minAlive = min(r.minAlive, r.aliveRegular)
	}
	if sn.failed {
		r.failed++
	} else {
		r.crashed++
		r.orphans += len(sn.clients)
	}
}

// supernodeUp counts a restarted supernode.
func (r *recorder) supernodeUp(s *Sim, b int32) {
	if int(b) < s.cfg.Supernodes {
		r.aliveRegular++
	}
}

func (r *recorder) demoted(s *Sim, on, excess int) {
	r.hb = &HandBack{DemotedAt: float64(s.now) / 1e9, OnMegas: on, Excess: excess,
		LowestAttached: float64(r.attachedLive) / float64(len(s.clients))}
}

func (r *recorder) drained(i, excess, k int) {
	for len(r.hb.Steps) <= i {
		r.hb.Steps = append(r.hb.Steps, 0)
	}
	r.hb.Steps[i] += k
}

// handedBack checks, every 100 ms after the demotion, whether every
// client is attached and no ex-mega is above its regular capacity.
func (r *recorder) handedBack(s *Sim) {
	if r.hb == nil || r.hb.TimeToHandedBack != nil || r.attachedLive != len(s.clients) {
		return
	}
	for b := s.cfg.Supernodes; b < len(s.sns); b++ {
		if sn := &s.sns[b]; sn.alive && len(sn.clients) > sn.capacity {
			return
		}
	}
	t := float64(s.now)/1e9 - r.hb.DemotedAt
	r.hb.TimeToHandedBack = &t
}

func (r *recorder) crashDoneAt(s *Sim) {
	r.crashDone = true
	r.attached(s, 0)
	for i := range s.sns {
		if s.sns[i].alive {
			r.slots += s.sns[i].capacity
		}
	}
}

func (r *recorder) served(uint8) {}

func (r *recorder) attempt(s *Sim, st uint8) {
	switch st {
	case stAccept:
		r.attempts.Accept++
	case stBusy, stRedirect:
		r.attempts.Busy++
	default:
		r.attempts.Error++
	}
	r.bucket++
}

// sample runs every 100 ms: it closes the attempts bucket, and every
// Params.Sample it adds a point to the series.
func (r *recorder) sample(s *Sim) {
	if s.now > 0 {
		r.series.AttemptsPer100 = append(r.series.AttemptsPer100, r.bucket)
		r.bucket = 0
	}
	r.handedBack(s)
	if s.now%int64(s.p.Sample) != 0 {
		return
	}
	se := &r.series
	se.T = append(se.T, float64(s.now)/1e9)
	se.Attached = append(se.Attached, round4(float64(r.attachedLive)/float64(len(s.clients))))
	r.loads = r.loads[:0]
	megas, megaLoad := 0, 0
	for b := range s.sns {
		sn := &s.sns[b]
		switch {
		case !sn.alive, sn.draining:
		case b >= s.cfg.Supernodes && !sn.auto:
			if sn.mega {
				megas++
				megaLoad += len(sn.clients)
			}
		default:
			r.loads = append(r.loads, float64(len(sn.clients))/float64(sn.capacity))
		}
	}
	se.AliveRegular = append(se.AliveRegular, r.aliveRegular)
	se.AliveMegas = append(se.AliveMegas, megas)
	se.MegaLoad = append(se.MegaLoad, megaLoad)
	slices.Sort(r.loads)
	q := func(f float64) float64 {
		if len(r.loads) == 0 {
			return 0
		}
		return round4(r.loads[min(len(r.loads)-1, int(f*float64(len(r.loads))))])
	}
	se.LoadMin = append(se.LoadMin, q(0))
	se.LoadP50 = append(se.LoadP50, q(0.5))
	se.LoadP90 = append(se.LoadP90, q(0.9))
	se.LoadMax = append(se.LoadMax, q(1))
}

func round4(x float64) float64 { return float64(int64(x*1e4+0.5)) / 1e4 }

func (r *recorder) report(s *Sim) *Report {
	sum := Summary{
		Orphans: r.orphans, SlotsAfterCrash: r.slots, TimeTo99: r.t99, TimeTo100: r.t100,
		LowestAttached: round4(r.lowest), FinalAttached: round4(float64(r.attachedLive) / float64(len(s.clients))),
		SupernodesCrashed: r.crashed, SupernodesFailed: r.failed,
		RegularAliveEnd: round4(float64(r.aliveRegular) / float64(s.cfg.Supernodes)),
		RegularAliveMin: round4(float64(r.minAlive) / float64(s.cfg.Supernodes)),
		Attempts:        r.attempts, Events: s.events,
	}
	if !r.crashDone {
		sum.LowestAttached = 1
	}
	for b := range s.cfg.Supernodes {
		sn := &s.sns[b]
		sum.PeakLoad = max(sum.PeakLoad, round4(float64(sn.peak)/float64(sn.capacity)))
		if sn.peak > sn.capacity {
			sum.AboveCapacity++
		}
	}
	sum.MegaPeak = slices.Max(append([]int{0}, r.series.MegaLoad...))
	if r.hb != nil {
		hb := *r.hb
		hb.LowestAttached = round4(hb.LowestAttached)
		if hb.TimeToHandedBack != nil {
			v := round4(*hb.TimeToHandedBack)
			hb.TimeToHandedBack = &v
		}
		sum.HandBack = &hb
	}
	sum.PeakAttempts100 = slices.Max(append([]int{0}, r.series.AttemptsPer100...))
	sum.Auto = s.autoSummary()
	return &Report{Config: s.cfg, Summary: sum, Series: r.series}
}

// JSON is the report's bytes, indented.
func (r *Report) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Write writes report.json, report.md and the plots (Plots) into dir
// (created if missing) and returns the files written.
func (r *Report) Write(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("sim: report: %w", err)
	}
	b, err := r.JSON()
	if err != nil {
		return nil, fmt.Errorf("sim: report: %w", err)
	}
	p := filepath.Join(dir, "report.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return nil, fmt.Errorf("sim: report: %w", err)
	}
	md := filepath.Join(dir, "report.md")
	if err := os.WriteFile(md, r.Markdown(), 0o644); err != nil {
		return nil, fmt.Errorf("sim: report: %w", err)
	}
	plots, err := WritePlots(r, dir)
	if err != nil {
		return nil, err
	}
	return append([]string{p, md}, plots...), nil
}

// Markdown is the summary as a Markdown page, with the plots (written
// beside it by Write) linked.
func (r *Report) Markdown() []byte {
	c, s := r.Config, r.Summary
	secs := func(p *float64) string {
		if p == nil {
			return "never"
		}
		return fmt.Sprintf("%.1f s", *p)
	}
	var b []byte
	b = fmt.Appendf(b, "# Simulation: %s, policy %s, seed %d\n\n", c.Scenario, c.Policy.Name, c.Seed)
	b = fmt.Appendf(b, "%d clients, %d supernodes of capacity %d, %d megas (capacity %d before the failure, %d after), "+
		"%.0f%% of the supernodes crash at %v, %v simulated. Rerun: `overlayd testnet sim --scenario %s --policy %s --clients %d --supernodes %d --seed %d --duration %v`.\n\n",
		c.Clients, c.Supernodes, c.Capacity, c.Megas, c.MegaBefore, c.MegaCapacity, 100*c.CrashFraction, c.CrashAt, c.Duration,
		c.Scenario, c.Policy.Name, c.Clients, c.Supernodes, c.Seed, c.Duration)
	b = append(b, "| figure | value |\n|---|---|\n"...)
	rows := [][2]string{
		{"orphans (clients of the crashed supernodes)", fmt.Sprint(s.Orphans)},
		{"slots after the crash (megas included)", fmt.Sprint(s.SlotsAfterCrash)},
		{"time to 99% / 100% attached", secs(s.TimeTo99) + " / " + secs(s.TimeTo100)},
		{"attached: lowest / final", fmt.Sprintf("%.4f / %.4f", s.LowestAttached, s.FinalAttached)},
		{"supernodes crashed / failed by overload", fmt.Sprintf("%d / %d", s.SupernodesCrashed, s.SupernodesFailed)},
		{"regular supernodes alive: fewest / end", fmt.Sprintf("%.2f / %.2f", s.RegularAliveMin, s.RegularAliveEnd)},
		{"peak load / capacity; supernodes ever above capacity", fmt.Sprintf("%.2f; %d", s.PeakLoad, s.AboveCapacity)},
		{"most clients on the megas", fmt.Sprint(s.MegaPeak)},
		{"attempts: accept / busy / error", fmt.Sprintf("%d / %d / %d", s.Attempts.Accept, s.Attempts.Busy, s.Attempts.Error)},
		{"peak attempts per 100 ms", fmt.Sprint(s.PeakAttempts100)},
		{"events", fmt.Sprint(s.Events)},
	}
	if a := s.Auto; a != nil {
		rows = append(rows,
			[2]string{"auto nodes that can promote", fmt.Sprint(a.Nodes)},
			[2]string{"auto promotions / demotions", fmt.Sprintf("%d / %d", a.Promotions, a.Demotions)},
			[2]string{"auto supernodes: at the crash / crashed / most / end", fmt.Sprintf("%d / %d / %d / %d", a.ServingAtCrash, a.Crashed, a.ServingPeak, a.ServingEnd)},
			[2]string{"formed (99% attached before the crash)", secs(a.FormedAt)},
			[2]string{"auto supernodes: peak load / capacity; ever above capacity", fmt.Sprintf("%.2f; %d", a.PeakLoad, a.AboveCapacity)})
	}
	for _, row := range rows {
		b = fmt.Appendf(b, "| %s | %s |\n", row[0], row[1])
	}
	b = append(b, "\n## Plots\n"...)
	for _, p := range Plots() {
		b = fmt.Appendf(b, "\n%s:\n\n![%s](%s)\n", p.Caption, p.File, p.File)
	}
	return b
}
