package client

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/protocol"
)

// metrics are the client's Prometheus series, overlayd_client_*.
type metrics struct {
	attempts       *prometheus.CounterVec
	failovers      prometheus.Counter
	returns        prometheus.Counter
	deadSupernodes prometheus.Counter
	attached       prometheus.Gauge
	keepaliveRTT   prometheus.Histogram
	retryWaits     prometheus.Histogram
	refused        *prometheus.CounterVec
	resumes        prometheus.Counter
	resumeGaps     prometheus.Counter
}

// Reasons a client refuses a message or an ack, the values of
// overlayd_client_messages_refused_total's reason label.
const (
	refusedSignature = "signature"  // not signed by its sender, or altered
	refusedMismatch  = "mismatch"   // signed for another message or recipient
	refusedDecrypt   = "decrypt"    // not sealed to this client
	refusedAck       = "ack"        // an ack its recipient did not sign
	refusedNotMember = "not_member" // a group message for a group not joined
	refusedGroup     = "group"      // a group message not stamped by the group's home or not signed by its publisher
)

var refusalReasons = [...]string{refusedSignature, refusedMismatch, refusedDecrypt, refusedAck, refusedNotMember, refusedGroup}

// refusalReason maps protocol's direct-message errors to a reason.
func refusalReason(err error) string {
	switch {
	case errors.Is(err, protocol.ErrDirectMismatch):
		return refusedMismatch
	case errors.Is(err, protocol.ErrDirectDecrypt):
		return refusedDecrypt
	}
	return refusedSignature
}

// attemptResults are the values of overlayd_client_attach_attempts_total's
// result label.
var attemptResults = [...]string{"accept", "busy", "redirect", "error"}

func newMetrics() *metrics {
	m := &metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overlayd_client_attach_attempts_total",
			Help: "Attach attempts by outcome: accept, busy, redirect, error.",
		}, []string{"result"}),
		failovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overlayd_client_failovers_total", Help: "Sessions lost or detached that led to a reattachment.",
		}),
		returns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overlayd_client_returns_total", Help: "Moves back to the home cluster after a failover.",
		}),
		deadSupernodes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overlayd_client_dead_supernodes_total", Help: "Sessions ended because the supernode stopped answering keepalives.",
		}),
		attached: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "overlayd_client_attached", Help: "1 while this node is attached to a supernode.",
		}),
		keepaliveRTT: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "overlayd_client_keepalive_rtt_seconds",
			Help:    "Time from a keepalive ping to its pong.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}),
		retryWaits: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "overlayd_client_retry_wait_seconds",
			Help:    "Backoff waits between failed attach passes.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
		resumes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overlayd_client_group_resumes_total", Help: "Group resumes completed: the home replayed what this client missed while it moved.",
		}),
		resumeGaps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overlayd_client_group_resume_gaps_total", Help: "Group resumes after which messages were missing: the home's replay log no longer held them (a gap notice was delivered).",
		}),
	}
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "overlayd_client_messages_refused_total",
		Help: "Direct messages and acks this client refused, by reason: signature (not signed by its sender, or altered on the way), mismatch (signed for another message or recipient), decrypt (not sealed to this client), ack (an ack its recipient did not sign), not_member (a group message for a group this client has not joined), group (a group message not stamped by the group's home or not signed by its publisher).",
	}, []string{"reason"})
	for _, r := range attemptResults {
		m.attempts.WithLabelValues(r)
	}
	for _, r := range refusalReasons {
		m.refused.WithLabelValues(r)
	}
	return m
}

// register adds the series to reg.
func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.attempts, m.failovers, m.returns, m.deadSupernodes, m.attached, m.keepaliveRTT, m.retryWaits, m.refused, m.resumes, m.resumeGaps} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
