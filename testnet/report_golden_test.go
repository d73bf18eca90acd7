package testnet

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/overlayd/overlayd/node"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/report.golden.json")

// goldenReport is a report with every field set, built without a clock.
func goldenReport() *Report {
	return &Report{
		Schema: ReportSchema, Scenario: "outage", Seed: 7,
		Versions: Versions{Overlayd: "dev", Go: "go1.26", Libp2p: "v0.52.0",
			Build: node.VersionInfo{Version: "v0.0.0-20260102030405-0123456789ab+dirty", Commit: "0123456789abcdef+dirty", Time: "2026-01-02T03:04:05Z", Go: "go1.26"}},
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
// shape shows here, and must bump ReportSchema if it removes or renames.
// Run with -update to accept a deliberate change.
func TestReportGolden(t *testing.T) {
	dir := t.TempDir()
	if _, err := WriteReport(goldenReport(), dir); err != nil {
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

// jsonKeys returns every key path of a decoded JSON value ("samples[].load[].name").
func jsonKeys(v any, prefix string, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := prefix + "." + k
			if prefix == "" {
				p = k
			}
			if prefix == "figures" {
				p = "figures.*" // names vary by scenario
			}
			out[p] = true
			jsonKeys(e, p, out)
		}
	case []any:
		for _, e := range x {
			jsonKeys(e, prefix+"[]", out)
		}
	}
}

// TestReportOfARealRunMatchesTheSchema runs a scenario and checks that its
// report.json has exactly the golden file's key paths.
func TestReportOfARealRunMatchesTheSchema(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Supernodes, cfg.Clients, cfg.Megas = 3, 6, 1
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := RunScenario(ctx, RunConfig{Config: cfg, Scenario: "steady", SampleEvery: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := WriteReport(rep, dir); err != nil {
		t.Fatal(err)
	}
	keys := func(path string) []string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		jsonKeys(v, "", m)
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	got, want := keys(filepath.Join(dir, "report.json")), keys(filepath.Join("testdata", "report.golden.json"))
	// A real run of steady has no events; events[] keys come from the golden file only.
	want = slices.DeleteFunc(want, func(k string) bool { return len(k) > 8 && k[:8] == "events[]" })
	got = slices.DeleteFunc(got, func(k string) bool { return len(k) > 8 && k[:8] == "events[]" })
	if !slices.Equal(got, want) {
		t.Fatalf("report.json keys\n got %v\nwant %v", got, want)
	}
	if rep.Seed != cfg.Seed || rep.Versions.Go == "" || rep.Versions.Build.Version == "" || len(rep.Samples) == 0 || !rep.Passed {
		t.Fatalf("report: seed %d versions %+v samples %d passed %v", rep.Seed, rep.Versions, len(rep.Samples), rep.Passed)
	}
}
