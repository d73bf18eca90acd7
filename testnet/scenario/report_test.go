package scenario

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/overlayd/overlayd/testnet"
	"github.com/overlayd/overlayd/testnet/report"
)

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
	cfg := testnet.DefaultConfig()
	cfg.Supernodes, cfg.Clients, cfg.Megas = 3, 6, 1
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, RunConfig{Config: cfg, Scenario: "steady", SampleEvery: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := report.Write(rep, dir); err != nil {
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
	got, want := keys(filepath.Join(dir, "report.json")), keys(filepath.Join("..", "report", "testdata", "report.golden.json"))
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
