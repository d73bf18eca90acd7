package supernode

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns the admission's counts as Prometheus series: sessions
// accepted and expired, attach streams refused by reason, handshakes in
// progress, and frames the clients' outboxes dropped by reason (see
// AdmissionStats).
func (a *Admission) Collector() prometheus.Collector {
	s := &a.stats
	c := &seriesCollector{}
	c.plain("overlayd_supernode_attach_accepted_total", "Attach requests accepted: sessions started.", prometheus.CounterValue, counter(&s.accepted))
	c.plain("overlayd_supernode_sessions_expired_total", "Sessions ended because the client was silent for the missed-keepalives bound.", prometheus.CounterValue, counter(&s.expired))
	c.labelled("overlayd_supernode_attach_refused_total",
		"Attach streams refused, by reason: busy (no attached-peers slot), redirect (not admitting), handshakes_full (too many handshakes in progress), peer_handshakes (too many from this peer), request_timeout (no request within the request timeout), bad_request (a request that did not arrive whole or did not decode).",
		"reason", map[string]*atomic.Uint64{
			"busy": &s.busy, "redirect": &s.redirected, "handshakes_full": &s.handshakesFull,
			"peer_handshakes": &s.peerHandshakes, "request_timeout": &s.requestTimeouts, "bad_request": &s.badRequests,
		})
	c.labelled("overlayd_supernode_outbox_dropped_total",
		"Frames for slow clients dropped because the client's outbox held its bound, by reason: frames (OutboxLimit frames, or the session ending), bytes (OutboxBytes bytes). The client is told by a gap notice.",
		"reason", map[string]*atomic.Uint64{"frames": &s.outboxFrames, "bytes": &s.outboxBytes})
	c.plain("overlayd_supernode_attach_handshakes_in_progress", "Attach streams whose request has not been read yet.",
		prometheus.GaugeValue, func() float64 { return float64(a.Stats().Handshaking) })
	return c
}
