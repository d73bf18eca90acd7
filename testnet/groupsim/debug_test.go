package groupsim

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestDump writes a seed's whole trace to $GROUPSIM_DUMP (debugging).
func TestDump(t *testing.T) {
	out := os.Getenv("GROUPSIM_DUMP")
	if out == "" {
		t.Skip("GROUPSIM_DUMP not set")
	}
	seed, _ := strconv.ParseUint(os.Getenv("GROUPSIM_SEED"), 10, 64)
	r := Run(seed, Params{FullTrace: true})
	os.WriteFile(out, []byte(strings.Join(r.Trace, "\n")+"\n"+strings.Join(r.Failures, "\n")+"\n"), 0o644)
}
