package testnet

import (
	"time"
)

// recReport is the JSON report of one recovery run.
type recReport struct {
	Run      string            `json:"run"` // no-mega or mega
	Seed     uint64            `json:"seed"`
	Scale    recScale          `json:"scale"`
	Settings map[string]string `json:"settings"`
	At       time.Time         `json:"at"`
	NumCPU   int               `json:"num_cpu"`
	LoadAvg  string            `json:"loadavg_at_end"`
	// ClientsStartedS is how long starting the clients took; AttachedS
	// how long until every client was attached and every directory full.
	ClientsStartedS float64                `json:"clients_started_s"`
	AttachedS       float64                `json:"all_attached_s"`
	Before          recBefore              `json:"before"`
	Failure         recFailure             `json:"failure"`
	Recovery        recRecovery            `json:"recovery"`
	HandBack        *recHandBack           `json:"handback,omitempty"`
	Supernodes      []recSNReport          `json:"supernodes"`
	Attempts        map[string]recAttempts `json:"client_attempts_by_phase"`
	ScanMs          dist                   `json:"sample_scan_ms"`
	// Process is what the test process did in each phase after the setup.
	Process map[string]runtimeFigures `json:"process_by_phase"`
	Targets recTargets                `json:"targets"`
	Samples []recSample               `json:"samples"`
}

// recBefore is the network just before the failure.
type recBefore struct {
	Attached int     `json:"attached"`
	Fraction float64 `json:"fraction"`
	OnMegas  int     `json:"on_would_be_megas"`
	// Slots are the regular supernodes' capacity, Megas' included.
	Slots int `json:"slots"`
}

// recFailure is what the failure did.
type recFailure struct {
	Killed []string `json:"killed"`
	// SlotsLost and SlotsLeft count regular capacity; SlotsLeftWithMegas
	// adds the megas' certificate capacity above their regular one.
	SlotsLost          int       `json:"slots_lost"`
	SlotsLeft          int       `json:"slots_left"`
	SlotsLeftWithMegas int       `json:"slots_left_with_megas"`
	Orphans            int       `json:"orphans"`
	KillMs             []float64 `json:"kill_ms"`
	PromoteMs          []float64 `json:"promote_ms,omitempty"`
	PromoteErrors      []string  `json:"promote_errors,omitempty"`
}

// recRecovery are the figures of the window after the failure.
type recRecovery struct {
	MinFraction   float64 `json:"min_fraction"`
	MaxFraction   float64 `json:"max_fraction"`
	FinalFraction float64 `json:"final_fraction"`
	FinalAttached int     `json:"final_attached"`
	// To99S and To100S are when the fraction first reached 99% and 100%
	// (nil: never in the window); Held…FromS from when it stayed there to
	// the window's end.
	To99S        *float64 `json:"to_99pct_s"`
	To100S       *float64 `json:"to_100pct_s"`
	Held99FromS  *float64 `json:"held_99pct_from_s"`
	Held100FromS *float64 `json:"held_100pct_from_s"`
	// OrphanReattachS is, over the orphans that reattached, the time from
	// the failure to the first sample that saw them attached again.
	OrphanReattachS        dist    `json:"orphan_reattach_s"`
	OrphansNeverReattached int     `json:"orphans_never_reattached"`
	PeakRegularRatio       float64 `json:"peak_regular_load_ratio"`
	PeakMegaRatio          float64 `json:"peak_mega_load_ratio"`
	OverCapacitySamples    int     `json:"over_capacity_samples"`
	ServerRefused          uint64  `json:"server_refused"`
	OnMegasFinal           int     `json:"on_megas_final"`
}

// recHandBack are the figures of the restart and the demotion.
type recHandBack struct {
	RestartS         float64  `json:"restart_s"`
	InDirectoriesS   float64  `json:"in_all_directories_s"`
	OnMegasAtRestart int      `json:"on_megas_at_restart"`
	OnMegasAtDemote  int      `json:"on_megas_at_demote"`
	ExcessAtDemote   int      `json:"mega_excess_at_demote"`
	DemoteErrors     []string `json:"demote_errors,omitempty"`
	// ToHandedBackS is the time from the demotion to the first sample with
	// every client attached and no former mega above its regular
	// capacity; ToOffMegasS to the first with no client on a former mega.
	ToHandedBackS       *float64 `json:"to_handed_back_s"`
	ToOffMegasS         *float64 `json:"to_off_megas_s"`
	TargetS             float64  `json:"target_s"`
	MinFraction         float64  `json:"min_fraction"`
	AttachedEnd         int      `json:"attached_end"`
	OnMegasEnd          int      `json:"on_megas_end"`
	PeakRegularRatio    float64  `json:"peak_regular_load_ratio"`
	OverCapacitySamples int      `json:"over_capacity_samples"`
	ServerRefused       uint64   `json:"server_refused"`
	demoteAt            float64  // seconds after the failure
}

// recSNReport is one supernode.
type recSNReport struct {
	Name            string             `json:"name"`
	ID              string             `json:"id"`
	Kind            string             `json:"kind"`
	RegularCapacity int                `json:"regular_capacity"`
	Killed          bool               `json:"killed,omitempty"`
	Peaks           map[string]recPeak `json:"peaks"`
	Refused         map[string]uint64  `json:"refused,omitempty"`
	Health          []recHealthResult  `json:"health,omitempty"`
}

// recHealthResult is one health check of a surviving supernode.
type recHealthResult struct {
	Phase       string  `json:"phase"`
	StatusOK    bool    `json:"status_ok"`
	InDirectory bool    `json:"in_directory"`
	PingOK      bool    `json:"ping_ok"`
	TookS       float64 `json:"took_s"`
}

func (h recHealthResult) ok() bool { return h.StatusOK && h.InDirectory && h.PingOK }

// recAttempts are the clients' attach attempts of one phase, from the
// observer events.
type recAttempts struct {
	Accept      int64 `json:"accept"`
	Busy        int64 `json:"busy"`
	Redirect    int64 `json:"redirect"`
	Error       int64 `json:"error"`
	SessionEnds int64 `json:"session_ends"`
	// Session ends by cause: on a killed supernode, moves back home,
	// detached by the supernode (hand-back), and lost: keepalive silence
	// or a stream error on a live supernode, which a healthy overlay in a
	// healthy process does not produce.
	EndsKilled   int64 `json:"ends_killed"`
	EndsReturned int64 `json:"ends_returned_home"`
	EndsDetached int64 `json:"ends_detached"`
	EndsLost     int64 `json:"ends_lost"`
}

// recTargets are the targets of the issue, measured.
type recTargets struct {
	NoOverCapacity     bool  `json:"no_supernode_over_capacity"`
	SupernodesFailed   int   `json:"supernodes_failed"`
	Attach99Within30s  bool  `json:"attach_99pct_within_30s"`
	Attach100Within60s bool  `json:"attach_100pct_within_60s"`
	HandBackInTime     *bool `json:"handback_within_drain_plus_return,omitempty"`
	// HarnessStalled says some goroutine of the test process waited to run
	// longer than the session timeout (3 keepalive intervals; bucket bound
	// of the scheduling latency) before or during the recovery window:
	// long enough for sessions to die of the harness alone, so lost
	// sessions and dips then measure the machine as much as the overlay.
	HarnessStalled bool `json:"harness_stalled"`
}

// recFirst returns the time of the first sample of phase that satisfies
// cond, and the time from which every later sample of the phase does.
func recFirst(ss []recSample, phase int, cond func(recSample) bool) (first, heldFrom *float64) {
	var held *float64
	for _, s := range ss {
		if s.phase != phase {
			continue
		}
		if cond(s) {
			if first == nil {
				first = ptr(s.T)
			}
			if held == nil {
				held = ptr(s.T)
			}
		} else {
			held = nil
		}
	}
	return first, held
}

func ptr[T any](v T) *T { return &v }

// recOr returns *p, or def when p is nil.
func recOr(p *float64, def float64) float64 {
	if p == nil {
		return def
	}
	return *p
}

// recFmt formats an optional time for logs.
func recFmt(p *float64) string {
	if p == nil {
		return "never"
	}
	return time.Duration(*p * float64(time.Second)).Round(10 * time.Millisecond).String()
}
