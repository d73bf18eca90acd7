package node

import (
	"io"
	"net/http"
	"testing"

	"github.com/overlayd/overlayd/node/config"
)

// TestProfilesNeverPublic: /debug/pprof/ is served on a loopback metrics
// listener, but not when --metrics-public opens the listener to the
// network (profiles reveal memory and cost CPU on demand); /metrics is
// served either way.
func TestProfilesNeverPublic(t *testing.T) {
	for _, tc := range []struct {
		name        string
		public      bool
		wantProfile int
	}{
		{"loopback metrics listener serves profiles", false, http.StatusOK},
		{"public metrics listener does not", true, http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig(t, config.RoleOrdinary)
			c.MetricsListen, c.MetricsPublic = "127.0.0.1:0", tc.public
			n := startNode(t, c)
			get := func(path string) int {
				resp, err := http.Get("http://" + n.metricLn.String() + path)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			if got := get("/metrics"); got != http.StatusOK {
				t.Fatalf("/metrics: %d", got)
			}
			if got := get("/debug/pprof/"); got != tc.wantProfile {
				t.Fatalf("/debug/pprof/: %d, want %d", got, tc.wantProfile)
			}
		})
	}
}
