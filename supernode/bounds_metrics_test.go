package supernode

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestBoundsMetrics: every refusal and drop of the bounds is a series of
// a reason-labelled counter, on the router's and the admission's
// collectors, and both collectors register on one registry.
func TestBoundsMetrics(t *testing.T) {
	r := &Router{}
	r.stats.LinkQueueBytes.Add(3)
	r.stats.PresenceOriginFull.Add(5)
	r.stats.OversizeGroup.Add(7)
	a := &Admission{}
	a.stats.peerHandshakes.Add(2)
	a.stats.outboxBytes.Add(4)
	reg := prometheus.NewRegistry()
	if err := reg.Register(r.Collector()); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(a.Collector()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		labels int
		want   string
	}{
		{"overlayd_supernode_link_frames_dropped_total", 6, `{reason="queue_bytes"} 3`},
		{"overlayd_supernode_records_refused_total", 9, `{reason="presence_origin_full"} 5`},
		{"overlayd_supernode_client_frames_refused_total", 3, `{reason="oversize_group"} 7`},
		{"overlayd_supernode_attach_refused_total", 6, `{reason="peer_handshakes"} 2`},
		{"overlayd_supernode_outbox_dropped_total", 2, `{reason="bytes"} 4`},
	} {
		if got, err := testutil.GatherAndCount(reg, tc.name); err != nil || got != tc.labels {
			t.Errorf("%s: %d series (%v), want %d", tc.name, got, err, tc.labels)
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var text strings.Builder
		for _, mf := range mfs {
			if mf.GetName() != tc.name {
				continue
			}
			for _, m := range mf.GetMetric() {
				fmt.Fprintf(&text, "{reason=%q} %g\n", m.GetLabel()[0].GetValue(), m.GetCounter().GetValue())
			}
		}
		if !strings.Contains(text.String(), tc.want) {
			t.Errorf("%s:\n%s\nwant %s", tc.name, text.String(), tc.want)
		}
	}
}
