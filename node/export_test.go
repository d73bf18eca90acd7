package node

import "github.com/prometheus/client_golang/prometheus/testutil"

// rejectedForTest returns how many announcements were refused for reason.
func (n *Node) rejectedForTest(reason string) float64 {
	return testutil.ToFloat64(n.m.rejected.WithLabelValues(reason))
}
