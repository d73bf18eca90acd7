package supernode

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// seriesCollector exports counts kept elsewhere (atomics, gauges read
// under a lock) as Prometheus series, read at scrape time.
type seriesCollector struct{ series []series }

// series is one time series: unlabelled, or one value of its metric's
// single label (outcome or reason).
type series struct {
	desc  *prometheus.Desc
	label string
	kind  prometheus.ValueType
	value func() float64
}

func counter(v *atomic.Uint64) func() float64 { return func() float64 { return float64(v.Load()) } }

// labelled adds one counter per label value of a metric with one label.
func (c *seriesCollector) labelled(name, help, label string, values map[string]*atomic.Uint64) {
	d := prometheus.NewDesc(name, help, []string{label}, nil)
	for l, v := range values {
		c.series = append(c.series, series{d, l, prometheus.CounterValue, counter(v)})
	}
}

// plain adds an unlabelled series.
func (c *seriesCollector) plain(name, help string, kind prometheus.ValueType, value func() float64) {
	c.series = append(c.series, series{prometheus.NewDesc(name, help, nil, nil), "", kind, value})
}

// Collector returns the router's counts as Prometheus series: its
// messaging outcomes, and every frame or record it refused or dropped, by
// reason (see RouterStats).
func (r *Router) Collector() prometheus.Collector {
	s := &r.stats
	c := &seriesCollector{}
	c.labelled("overlayd_supernode_direct_messages_total",
		"Direct messages this supernode handled, by outcome: delivered_local (to a client attached here), relayed (to the recipient's supernode), stored (the recipient is offline; a majority of its home cluster stored it), offline (offline and not stored), unreachable (the recipient's supernode could not be reached), busy (refused: relays at capacity).",
		"outcome", map[string]*atomic.Uint64{
			"delivered_local": &s.DeliveredLocal, "relayed": &s.Relayed, "stored": &s.OfflineSent, "offline": &s.Offline,
			"unreachable": &s.Unreachable, "busy": &s.Busy,
		})
	for _, u := range []struct {
		name, help string
		value      *atomic.Uint64
	}{
		{"overlayd_supernode_offline_stored_total", "Direct messages for offline recipients this supernode stored on disk as a member of the recipient's home cluster.", &s.OfflineStored},
		{"overlayd_supernode_offline_delivered_total", "Stored messages this supernode forwarded to the recipient's supernode when it attached (again after a missing ack included).", &s.OfflineDelivered},
		{"overlayd_supernode_offline_deleted_total", "Stored messages deleted on the recipient's signed ack.", &s.OfflineDeleted},
		{"overlayd_supernode_offline_expired_total", "Stored messages removed undelivered at their expiry (offline TTL).", &s.OfflineExpired},
		{"overlayd_supernode_offline_acks_refused_total", "Acks of stored messages not signed by the recipient (forged): they delete nothing.", &s.OfflineForgedAcks},
	} {
		c.plain(u.name, u.help, prometheus.CounterValue, counter(u.value))
	}
	c.labelled("overlayd_supernode_offline_refused_total",
		"Requests to store a message for an offline recipient this supernode refused, by reason: over_quota (the recipient's or the sender's quota), full (the store holds --store-max-bytes), invalid (not signed by its sender, not in the recipient's home cluster, malformed, or no store), busy (no relays slot, or a store error).",
		"reason", map[string]*atomic.Uint64{
			"over_quota": &s.OfflineOverQuota, "full": &s.OfflineFull, "invalid": &s.OfflineInvalid, "busy": &s.OfflineBusy,
		})
	c.plain("overlayd_supernode_store_bytes", "Bytes of records in this supernode's store (offline messages and replay logs), bounded by --store-max-bytes.",
		prometheus.GaugeValue, func() float64 { o, _ := r.Offline(); return float64(o.Bytes) })
	c.plain("overlayd_supernode_offline_messages", "Direct messages this supernode holds for offline recipients.",
		prometheus.GaugeValue, func() float64 { o, _ := r.Offline(); return float64(o.Messages) })
	for _, u := range []struct {
		name, help string
		value      *atomic.Uint64
	}{
		{"overlayd_supernode_group_publishes_numbered_total", "Group publishes this supernode numbered as the group's home.", &s.GroupPublishes},
		{"overlayd_supernode_group_frames_sent_total", "Group message frames the group homes on this supernode sent to other supernodes: one per supernode holding members per publish.", &s.GroupFramesSent},
		{"overlayd_supernode_group_fanouts_total", "Group messages handed to the local fan-out engine for this supernode's members.", &s.GroupFanouts},
		{"overlayd_supernode_group_fanout_refused_total", "Group messages refused for lack of fan-out capacity: a publish answered BUSY at the home, or a batch not queued for local fan-out.", &s.FanoutRefused},
	} {
		c.plain(u.name, u.help, prometheus.CounterValue, counter(u.value))
	}
	c.labelled("overlayd_supernode_client_frames_refused_total",
		"Frames for a local client dropped because, encoded, they exceed the session frame limit a client reads under, by reason: oversize_direct (a relayed direct message; its sender is told INVALID), oversize_group (a relayed group message, or a relayed publish refused at the home), oversize_other (acks, results, members lists).",
		"reason", map[string]*atomic.Uint64{
			"oversize_direct": &s.OversizeDirect, "oversize_group": &s.OversizeGroup, "oversize_other": &s.OversizeOther,
		})
	c.labelled("overlayd_supernode_link_frames_dropped_total",
		"Frames for another supernode not sent, by reason: queue_frames, queue_bytes (the link's queue bound), total_bytes (the bound over all links), memory (the resource manager refused), closed (the router is stopping), failed (lost to a failed dial or write).",
		"reason", map[string]*atomic.Uint64{
			"queue_frames": &s.LinkQueueFrames, "queue_bytes": &s.LinkQueueBytes, "total_bytes": &s.LinksTotalBytes,
			"memory": &s.LinkMemory, "closed": &s.LinkClosed, "failed": &s.LinkFailed,
		})
	c.plain("overlayd_supernode_link_frames_rewritten_total",
		"Frames for another supernode whose write failed on a stream opened before (its connection had died unnoticed, or the peer reset it) and that were written again on a new stream.",
		prometheus.CounterValue, counter(&s.LinkRewritten))
	c.labelled("overlayd_supernode_records_refused_total",
		"Records from other supernodes refused, by reason. Not signed by their originator (a supernode forges records, or a bug): presence_unsigned (an attachment without the client's claim), membership_unsigned (a join without the member's claim), publish_unsigned (a publish without the publisher's signature), group_message_unsigned (a group message not stamped by a home of the group: the home by this supernode's ring, or one it told its members of the group to while that one's record of them lasts). At a bound: presence_full, presence_origin_full (the presence bound, or the sending supernode's share of it), memberships_full, memberships_origin_full (group memberships at this home), home_groups_full (groups this supernode is home to).",
		"reason", map[string]*atomic.Uint64{
			"presence_unsigned": &s.PresenceRefused, "membership_unsigned": &s.MembershipRefused,
			"publish_unsigned": &s.PublishRefused, "group_message_unsigned": &s.GroupRefused,
			"presence_full": &s.PresenceFull, "presence_origin_full": &s.PresenceOriginFull,
			"memberships_full": &s.MembershipsFull, "memberships_origin_full": &s.MembershipsOriginFull,
			"home_groups_full": &s.HomeGroupsFull,
		})
	r.noLossSeries(c)
	c.plain("overlayd_supernode_link_queued_bytes", "Bytes queued on the links to other supernodes.",
		prometheus.GaugeValue, func() float64 { return float64(r.Bounds().LinkQueuedBytes) })
	c.plain("overlayd_supernode_presence_records", "Presence records this supernode keeps as a home cluster member.",
		prometheus.GaugeValue, func() float64 { return float64(r.Bounds().PresenceRecords) })
	c.plain("overlayd_supernode_home_memberships", "Group memberships this supernode keeps as group home.",
		prometheus.GaugeValue, func() float64 { return float64(r.Bounds().Memberships) })
	return c
}

// BoundsStats is the state of the router's bounded queues and maps, with
// their bounds, for the node's status.
type BoundsStats struct {
	// LinkQueuedBytes are queued on all links; LinkQueueBytes bounds one
	// link, LinksTotalBytes all of them.
	LinkQueuedBytes, LinkQueueBytes, LinksTotalBytes int
	// PresenceRecords kept, bounded by MaxPresence (of which one other
	// supernode may hold MaxPresencePerOrigin).
	PresenceRecords, MaxPresence, MaxPresencePerOrigin int
	// Memberships and HomeGroups kept as group home, bounded by
	// MaxMemberships (MaxMembershipsPerOrigin per other supernode) and
	// MaxHomeGroups.
	Memberships, MaxMemberships, MaxMembershipsPerOrigin, HomeGroups, MaxHomeGroups int
}

// Bounds returns the router's queue and record sizes and their bounds.
func (r *Router) Bounds() BoundsStats {
	var b BoundsStats
	if r.links != nil {
		_, _, b.LinkQueuedBytes = r.links.queued("")
		b.LinkQueueBytes, b.LinksTotalBytes = linkQueueBytes, linksTotalBytes
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b.PresenceRecords = len(r.presence)
	if r.core != nil {
		b.Memberships, b.HomeGroups = r.core.MembershipsHeld()
	}
	b.MaxPresence, b.MaxPresencePerOrigin = r.bounds.presence, r.bounds.presencePerOrigin
	b.MaxMemberships, b.MaxMembershipsPerOrigin, b.MaxHomeGroups = r.bounds.memberships, r.bounds.membershipsPerOrigin, r.bounds.homeGroups
	return b
}

func (c *seriesCollector) Describe(ch chan<- *prometheus.Desc) {
	seen := map[*prometheus.Desc]bool{}
	for _, s := range c.series {
		if !seen[s.desc] {
			seen[s.desc] = true
			ch <- s.desc
		}
	}
}

func (c *seriesCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.series {
		if s.label == "" {
			ch <- prometheus.MustNewConstMetric(s.desc, s.kind, s.value())
		} else {
			ch <- prometheus.MustNewConstMetric(s.desc, s.kind, s.value(), s.label)
		}
	}
}
