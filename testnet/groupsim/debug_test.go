package groupsim

import (
	"maps"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestDump writes a seed's whole trace to $GROUPSIM_DUMP (debugging);
// GROUPSIM_ONLY names the only fault kinds enabled; GROUPSIM_PARTITION
// sets the partitions' rate.
func TestDump(t *testing.T) {
	out := os.Getenv("GROUPSIM_DUMP")
	if out == "" {
		t.Skip("GROUPSIM_DUMP not set")
	}
	seed, _ := strconv.ParseUint(os.Getenv("GROUPSIM_SEED"), 10, 64)
	p := Params{FullTrace: true}
	if r, err := strconv.ParseFloat(os.Getenv("GROUPSIM_PARTITION"), 64); err == nil {
		p.Faults = maps.Clone(DefaultParams().Faults)
		p.Faults[FaultPartition] = r
	}
	if only := os.Getenv("GROUPSIM_ONLY"); only != "" {
		p.Faults = map[string]float64{}
		for _, k := range strings.Split(only, ",") {
			p.Faults[k] = 1
		}
	}
	r := Run(seed, p)
	os.WriteFile(out, []byte(strings.Join(r.Trace, "\n")+"\n"+strings.Join(r.Failures, "\n")+"\n"), 0o644)
}
