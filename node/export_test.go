package node

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// rejectedForTest returns how many announcements were refused for reason.
func (n *Node) rejectedForTest(reason string) float64 {
	return testutil.ToFloat64(n.m.rejected.WithLabelValues(reason))
}

// attachmentForTest returns the client's current supernode ("" if none).
func (n *Node) attachmentForTest() peer.ID {
	if n.client == nil {
		return ""
	}
	a, ok := n.client.Attachment()
	if !ok {
		return ""
	}
	return a.Supernode
}

// attachedSince returns when the client's current session started.
func attachedSince(n *Node) time.Time {
	a, _ := n.client.Attachment()
	return a.Since
}

// metricForTest returns the value of the counter or gauge name on the
// node's registry, with the label pairs given (name, value, ...); 0 when
// there is no such series.
func (n *Node) metricForTest(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func newIDForTest(t *testing.T) peer.ID {
	t.Helper()
	_, id := newKey(t)
	return id
}
