package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/overlayd/overlayd/node/version"
)

// Schema is the version of report.json's layout. Bump it when a
// field changes meaning or disappears; adding a field does not bump it.
const Schema = 1

// Report is everything a scenario run measured: report.json is this value,
// and the plots and report.md are drawn from it alone.
type Report struct {
	Schema   int      `json:"schema"`
	Scenario string   `json:"scenario"`
	Seed     uint64   `json:"seed"`
	Versions Versions `json:"versions"`
	Config   Sizes    `json:"config"`
	// DurationSeconds is the run's length, from the first node's start.
	DurationSeconds float64 `json:"duration_seconds"`
	Passed          bool    `json:"passed"`
	// Criteria are the scenario's pass criteria, in the order checked.
	Criteria []Criterion `json:"criteria"`
	// Figures are the run's named measurements (seconds, counts, ratios;
	// the name says which), for comparing runs.
	Figures map[string]float64 `json:"figures"`
	// Events are the moments the scenario acted on the network: kills,
	// restarts, partitions, heals, storms, promotions, hand-backs.
	Events []Event `json:"events"`
	// Samples is the network's state over time, one sample per tick.
	Samples []Sample `json:"samples"`
}

// Versions names what produced the report.
type Versions struct {
	Overlayd string `json:"overlayd"`
	Go       string `json:"go"`
	Libp2p   string `json:"libp2p"`
	// Build is the overlayd build that ran: version, commit (+dirty) and
	// build time, as `overlayd version --json` prints them. Write
	// fills it from the running binary when it is zero.
	Build version.Info `json:"build"`
}

// Sizes is the network's shape and timing.
type Sizes struct {
	Supernodes              int     `json:"supernodes"`
	Clients                 int     `json:"clients"`
	Megas                   int     `json:"megas"`
	Capacity                int     `json:"capacity"`
	AnnounceIntervalSeconds float64 `json:"announce_interval_seconds"`
	KeepaliveSeconds        float64 `json:"keepalive_seconds"`
}

// Criterion is one pass criterion and what the run measured against it.
type Criterion struct {
	Name string `json:"name"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Pass bool   `json:"pass"`
}

// Event kinds.
const (
	EventKill      = "kill"
	EventRestart   = "restart"
	EventPartition = "partition"
	EventHeal      = "heal"
	EventStorm     = "storm"
	EventPromote   = "promote"
	EventHandBack  = "hand-back"
	EventJoin      = "join"
	EventLeave     = "leave"
)

// Event is one action of the scenario on the network.
type Event struct {
	// T is seconds since the run began.
	T      float64 `json:"t"`
	Kind   string  `json:"kind"`
	Detail string  `json:"detail"`
}

// Sample is the network's state at one moment. Counters are cumulative
// since the run began; rates are their differences between samples.
type Sample struct {
	T float64 `json:"t"`
	// Attached counts the live ordinary nodes with a session; Clients the
	// live ordinary nodes; Supernodes the live supernodes (megas included).
	Attached   int `json:"attached"`
	Clients    int `json:"clients"`
	Supernodes int `json:"supernodes"`
	// Refusals: BUSY answers of every live supernode's attach semaphore.
	Refusals uint64 `json:"refusals"`
	// Sent and Delivered: messages the scenario sent, and deliveries it
	// counted (a group message counts once per member that got it).
	Sent      uint64 `json:"sent"`
	Delivered uint64 `json:"delivered"`
	// Load is each live supernode's attached clients against its capacity.
	Load []Load `json:"load"`
}

// Load is one supernode's use at one moment.
type Load struct {
	// Name is the testnet's name of the node (sn0, mega0, ...), stable
	// across restarts.
	Name     string `json:"name"`
	Attached int    `json:"attached"`
	Capacity int    `json:"capacity"`
	Mega     bool   `json:"mega"`
}

// Write writes dir/report.json, the plots and dir/report.md,
// creating dir. It returns the files written.
func Write(r *Report, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	if r.Versions.Build == (version.Info{}) {
		r.Versions.Build = version.Build()
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	jsonPath := filepath.Join(dir, "report.json")
	if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	plots, err := WritePlots(r, dir)
	if err != nil {
		return nil, err
	}
	md, err := WriteMarkdown(r, dir, plots)
	if err != nil {
		return nil, err
	}
	return append(append([]string{jsonPath}, plots...), md), nil
}
