package report

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/overlayd/overlayd/node/version"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/report.golden.json")

// goldenReport is a report with every field set, built without a clock.
func goldenReport() *Report {
	return &Report{
		Schema: Schema, Scenario: "outage", Seed: 7,
		Versions: Versions{Overlayd: "dev", Go: "go1.26", Libp2p: "v0.52.0",
			Build: version.Info{Version: "v0.0.0-20260102030405-0123456789ab+dirty", Commit: "0123456789abcdef+dirty", Time: "2026-01-02T03:04:05Z", Go: "go1.26"}},
		Config:          Sizes{Supernodes: 4, Clients: 16, Megas: 1, Capacity: 6, AnnounceIntervalSeconds: 0.5, KeepaliveSeconds: 0.5},
		DurationSeconds: 3.5, Passed: false,
		Criteria: []Criterion{
			{Name: "network formed", Want: "within 30s", Got: "16/16", Pass: true},
			{Name: "clients re-attached after outage", Want: "within 15s", Got: "15/16", Pass: false},
		},
		Figures: map[string]float64{"form_seconds": 1.25, "outage_reattach_seconds": 15},
		Events:  []Event{{T: 1.5, Kind: EventKill, Detail: "sn2"}},
		Samples: []Sample{
			{T: 1, Attached: 16, Clients: 16, Supernodes: 5, Refusals: 0, Sent: 0, Delivered: 0,
				Load: []Load{{Name: "sn0", Attached: 6, Capacity: 6}, {Name: "mega0", Attached: 1, Capacity: 24, Mega: true}}},
			{T: 2, Attached: 12, Clients: 16, Supernodes: 4, Refusals: 3, Sent: 5, Delivered: 80,
				Load: []Load{{Name: "sn0", Attached: 6, Capacity: 6}}},
		},
	}
}

// TestReportGolden pins report.json's layout: a change to a field's name or
// shape shows here, and must bump Schema if it removes or renames.
// Run with -update to accept a deliberate change.
func TestReportGolden(t *testing.T) {
	dir := t.TempDir()
	if _, err := Write(goldenReport(), dir); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "report.golden.json")
	if *updateGolden {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("report.json differs from %s (rerun with -update if deliberate):\n%s", golden, got)
	}
}
