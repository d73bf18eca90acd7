package supernode

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The router's counts are exported as Prometheus counters, each count to
// its own series.
func TestRouterCollector(t *testing.T) {
	r := &Router{}
	s := r.Stats()
	s.DeliveredLocal.Add(1)
	s.Relayed.Add(2)
	s.Offline.Add(3)
	s.Unreachable.Add(4)
	s.Busy.Add(5)
	s.GroupPublishes.Add(6)
	s.GroupFramesSent.Add(7)
	s.GroupFanouts.Add(8)
	s.FanoutRefused.Add(9)
	s.PresenceRefused.Add(10)
	s.MembershipRefused.Add(11)
	s.PublishRefused.Add(12)
	s.GroupRefused.Add(13)
	reg := prometheus.NewRegistry()
	if err := reg.Register(r.Collector()); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP overlayd_supernode_direct_messages_total Direct messages this supernode handled, by outcome: delivered_local (to a client attached here), relayed (to the recipient's supernode), stored (the recipient is offline; a majority of its home cluster stored it), offline (offline and not stored), unreachable (the recipient's supernode could not be reached), busy (refused: relays at capacity).
# TYPE overlayd_supernode_direct_messages_total counter
overlayd_supernode_direct_messages_total{outcome="busy"} 5
overlayd_supernode_direct_messages_total{outcome="delivered_local"} 1
overlayd_supernode_direct_messages_total{outcome="offline"} 3
overlayd_supernode_direct_messages_total{outcome="relayed"} 2
overlayd_supernode_direct_messages_total{outcome="stored"} 0
overlayd_supernode_direct_messages_total{outcome="unreachable"} 4
# HELP overlayd_supernode_group_fanout_refused_total Group messages refused for lack of fan-out capacity: a publish answered BUSY at the home, or a batch not queued for local fan-out.
# TYPE overlayd_supernode_group_fanout_refused_total counter
overlayd_supernode_group_fanout_refused_total 9
# HELP overlayd_supernode_group_fanouts_total Group messages handed to the local fan-out engine for this supernode's members.
# TYPE overlayd_supernode_group_fanouts_total counter
overlayd_supernode_group_fanouts_total 8
# HELP overlayd_supernode_group_frames_sent_total Group message frames the group homes on this supernode sent to other supernodes: one per supernode holding members per publish.
# TYPE overlayd_supernode_group_frames_sent_total counter
overlayd_supernode_group_frames_sent_total 7
# HELP overlayd_supernode_group_publishes_numbered_total Group publishes this supernode numbered as the group's home.
# TYPE overlayd_supernode_group_publishes_numbered_total counter
overlayd_supernode_group_publishes_numbered_total 6
# HELP overlayd_supernode_records_refused_total Records refused because their originator did not sign them, by record: presence (an attachment without the client's claim), membership (a join without the member's claim), publish (a publish without the publisher's signature), group_message (a group message not stamped by the group's current home). A count above zero means a supernode forges records, or a bug.
# TYPE overlayd_supernode_records_refused_total counter
overlayd_supernode_records_refused_total{record="group_message"} 13
overlayd_supernode_records_refused_total{record="membership"} 11
overlayd_supernode_records_refused_total{record="presence"} 10
overlayd_supernode_records_refused_total{record="publish"} 12
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "overlayd_supernode_direct_messages_total",
		"overlayd_supernode_group_fanout_refused_total", "overlayd_supernode_group_fanouts_total",
		"overlayd_supernode_group_frames_sent_total", "overlayd_supernode_group_publishes_numbered_total"); err != nil {
		t.Fatal(err)
	}
	// Scrapes read the live counts.
	s.GroupFramesSent.Add(1)
	const frames = "overlayd_supernode_group_frames_sent_total"
	again := "# HELP " + frames + " Group message frames the group homes on this supernode sent to other supernodes: one per supernode holding members per publish.\n# TYPE " + frames + " counter\n" + frames + " 8\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(again), frames); err != nil {
		t.Fatal(err)
	}
}
