package testnet

import (
	"context"
	"testing"
	"time"
)

// smallRun is a scenario run at the scale go test uses.
func smallRun(t *testing.T, scenario string, adjust func(*RunConfig)) *Report {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Supernodes, cfg.Clients, cfg.Capacity, cfg.MegaCapacity = 4, 16, 6, 24
	rc := RunConfig{Config: cfg, Scenario: scenario, SampleEvery: 100 * time.Millisecond}
	if adjust != nil {
		adjust(&rc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := RunScenario(ctx, rc)
	if err != nil {
		t.Fatalf("%s: %v", scenario, err)
	}
	for _, c := range rep.Criteria {
		t.Logf("%-5v %s: want %s; got %s", c.Pass, c.Name, c.Want, c.Got)
	}
	t.Logf("figures %v, %d samples, %.1fs", rep.Figures, len(rep.Samples), rep.DurationSeconds)
	return rep
}

func TestScenarios(t *testing.T) {
	for _, name := range ScenarioNames() {
		t.Run(name, func(t *testing.T) {
			if rep := smallRun(t, name, nil); !rep.Passed {
				t.Errorf("scenario %s failed its criteria", name)
			}
		})
	}
}

// TestStormCriterionNeedsJitter shows the storm's criterion guarding the
// behaviour: with the clients' jitter off, the reconnect wave is not spread
// and the scenario fails.
func TestStormCriterionNeedsJitter(t *testing.T) {
	rep := smallRun(t, "storm", func(rc *RunConfig) { rc.NoJitter = true })
	if rep.Passed {
		t.Fatal("the storm scenario passed with the clients' jitter off")
	}
	for _, c := range rep.Criteria {
		if c.Name == "reconnect wave spread" && c.Pass {
			t.Fatalf("the wave criterion held without jitter: %s", c.Got)
		}
	}
}
