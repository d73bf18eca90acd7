package supernode

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// routerCollector exports the router's cumulative counts (RouterStats) as
// Prometheus counters, read at scrape time.
type routerCollector struct{ series []routerSeries }

// routerSeries is one count: an unlabelled counter, or one outcome of the
// direct-message counter.
type routerSeries struct {
	desc    *prometheus.Desc
	outcome string
	value   *atomic.Uint64
}

// Collector returns the router's counts as Prometheus counters.
func (r *Router) Collector() prometheus.Collector {
	s := &r.stats
	direct := prometheus.NewDesc("overlayd_supernode_direct_messages_total",
		"Direct messages this supernode handled, by outcome: delivered_local (to a client attached here), relayed (to the recipient's supernode), offline, unreachable (the recipient's supernode could not be reached), busy (refused: relays at capacity).",
		[]string{"outcome"}, nil)
	c := &routerCollector{}
	for outcome, v := range map[string]*atomic.Uint64{
		"delivered_local": &s.DeliveredLocal, "relayed": &s.Relayed, "offline": &s.Offline,
		"unreachable": &s.Unreachable, "busy": &s.Busy,
	} {
		c.series = append(c.series, routerSeries{direct, outcome, v})
	}
	forged := prometheus.NewDesc("overlayd_supernode_records_refused_total",
		"Records refused because their originator did not sign them, by record: presence (an attachment without the client's claim), membership (a join without the member's claim), publish (a publish without the publisher's signature), group_message (a group message not stamped by the group's current home). A count above zero means a supernode forges records, or a bug.",
		[]string{"record"}, nil)
	for record, v := range map[string]*atomic.Uint64{
		"presence": &s.PresenceRefused, "membership": &s.MembershipRefused,
		"publish": &s.PublishRefused, "group_message": &s.GroupRefused,
	} {
		c.series = append(c.series, routerSeries{forged, record, v})
	}
	for _, u := range []struct {
		name, help string
		value      *atomic.Uint64
	}{
		{"overlayd_supernode_group_publishes_numbered_total", "Group publishes this supernode numbered as the group's home.", &s.GroupPublishes},
		{"overlayd_supernode_group_frames_sent_total", "Group message frames the group homes on this supernode sent to other supernodes: one per supernode holding members per publish.", &s.GroupFramesSent},
		{"overlayd_supernode_group_fanouts_total", "Group messages handed to the local fan-out engine for this supernode's members.", &s.GroupFanouts},
		{"overlayd_supernode_group_fanout_refused_total", "Group messages refused for lack of fan-out capacity: a publish answered BUSY at the home, or a batch not queued for local fan-out.", &s.FanoutRefused},
	} {
		c.series = append(c.series, routerSeries{prometheus.NewDesc(u.name, u.help, nil, nil), "", u.value})
	}
	return c
}

func (c *routerCollector) Describe(ch chan<- *prometheus.Desc) {
	seen := map[*prometheus.Desc]bool{}
	for _, s := range c.series {
		if !seen[s.desc] {
			seen[s.desc] = true
			ch <- s.desc
		}
	}
}

func (c *routerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.series {
		v := float64(s.value.Load())
		if s.outcome == "" {
			ch <- prometheus.MustNewConstMetric(s.desc, prometheus.CounterValue, v)
		} else {
			ch <- prometheus.MustNewConstMetric(s.desc, prometheus.CounterValue, v, s.outcome)
		}
	}
}
