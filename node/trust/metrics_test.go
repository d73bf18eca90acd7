package trust

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/overlayd/overlayd/protocol"
)

// TestMetrics: refusals are counted by reason, and the expiry gauges show
// the node's own certificates (0 without one).
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	until := time.Unix(1_900_000_000, 0)
	m, err := NewMetrics(reg,
		func() (protocol.MegaCert, bool) { return protocol.MegaCert{NotAfter: until}, true },
		func() (protocol.SupernodeCert, bool) { return protocol.SupernodeCert{}, false })
	if err != nil {
		t.Fatal(err)
	}
	m.Rejected(protocol.CertUntrusted)
	if got := testutil.ToFloat64(m.rejected.WithLabelValues(string(protocol.CertUntrusted))); got != 1 {
		t.Fatalf("rejected %v", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if g := mf.GetMetric()[0].GetGauge(); g != nil {
			got[mf.GetName()] = g.GetValue()
		}
	}
	if got["overlayd_node_mega_cert_not_after_seconds"] != 1_900_000_000 || got["overlayd_node_supernode_cert_not_after_seconds"] != 0 {
		t.Fatalf("gauges %v", got)
	}
}

// TestMetricsSupernodeCert: both expiry series are gathered, and a second
// registration on the same registry is refused.
func TestMetricsSupernodeCert(t *testing.T) {
	reg := prometheus.NewRegistry()
	none := func() (protocol.MegaCert, bool) { return protocol.MegaCert{}, false }
	sn := func() (protocol.SupernodeCert, bool) { return protocol.SupernodeCert{NotAfter: time.Unix(5, 0)}, true }
	if _, err := NewMetrics(reg, none, sn); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "overlayd_node_supernode_cert_not_after_seconds", "overlayd_node_mega_cert_not_after_seconds"); err != nil || n != 2 {
		t.Fatalf("%d series, %v", n, err)
	}
	if _, err := NewMetrics(reg, none, sn); err == nil {
		t.Fatal("registered twice")
	}
}
