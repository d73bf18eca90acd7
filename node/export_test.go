package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/node/config"
)

// rejectedForTest returns how many announcements were refused for reason
// (node/dirdriver's series, read from the node's registry).
func (n *Node) rejectedForTest(reason string) float64 {
	v, err := metricValue(n.reg, "overlayd_directory_announcements_rejected_total", "reason", reason)
	if err != nil {
		panic(err)
	}
	return v
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
	v, err := metricValue(n.reg, name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// metricValue is metricForTest's reading of reg.
func metricValue(reg prometheus.Gatherer, name string, labels ...string) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, fmt.Errorf("gather metrics: %w", err)
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
				return m.GetCounter().GetValue(), nil
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), nil
			}
		}
	}
	return 0, nil
}

func newIDForTest(t *testing.T) peer.ID {
	t.Helper()
	_, id := newKey(t)
	return id
}

// viewRefreshesForTest returns how many view refreshes the node
// completed (fetches of its whole view that a supernode answered).
func (n *Node) viewRefreshesForTest(t testing.TB) float64 {
	t.Helper()
	return n.metricForTest(t, "overlayd_directory_view_fetches_total", "purpose", "refresh", "result", "ok")
}

// afterViewRefreshes waits until an ordinary node completed k more view
// refreshes than when it is called. A refresh's request may already be
// on its way at the call, so a caller that needs a view built after some
// event asks for two.
func afterViewRefreshes(t testing.TB, n *Node, k int, within time.Duration) {
	t.Helper()
	if !n.cfg.PartialView() {
		t.Fatalf("%s keeps no partial view", n.ID().ShortString())
	}
	before := n.viewRefreshesForTest(t)
	waitFor(t, within, fmt.Sprintf("%d view refreshes on %s", k, n.ID().ShortString()), func() bool {
		return n.viewRefreshesForTest(t) >= before+float64(k)
	})
}

// neverServes makes c a node that hears the directory topic and is a
// client, but never serves: an auto node whose capacity is below its
// --auto-min-capacity (role.Decide promotes only a node with enough;
// loopback is not public reachability and the default minimum uptime is
// 10 minutes besides). Since issue 21 a pinned ordinary node keeps a
// partial view instead of hearing the topic, so tests of what a topic
// receiver does with an announcement use this or a supernode.
func neverServes(c *Config) {
	c.Role = config.RoleAuto
	c.Capacity = 1
	c.AutoMinCapacity = 2
}

// hearerConfig is attachConfig for a node that never serves
// (neverServes).
func hearerConfig(tb testing.TB, boot string) Config {
	tb.Helper()
	c := attachConfig(tb, config.RoleAuto, boot)
	neverServes(&c)
	return c
}

// setReachabilityForTest sets what AutoNAT would have told the node, as
// the reachability loop does (circuit.Reach.Watch).
func (n *Node) setReachabilityForTest(r network.Reachability) {
	if n.reach.Set(r) {
		n.relay.Kick()
	}
}
