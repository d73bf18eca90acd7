package client

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// EventKind names what an Event reports.
type EventKind string

// Events a client reports to its observer.
const (
	// EventAttempt: one attach attempt ended; Result is accept, busy,
	// redirect or error, Latency the time from opening the stream to the
	// answer.
	EventAttempt EventKind = "attempt"
	// EventKeepalive: a pong arrived; Latency is the ping's round trip.
	EventKeepalive EventKind = "keepalive"
	// EventSessionEnd: the client's session ended (Result says why).
	EventSessionEnd EventKind = "session_end"
	// EventReady: the client has waited for its ring and is about to make
	// its first attach pass (held first by an attach gate, if it has one).
	EventReady EventKind = "ready"
)

// Event is one observation of the client, for testnets and benchmarks that
// need per-node figures (go-libp2p's own metrics are process-global, and a
// node's Prometheus registry aggregates).
type Event struct {
	Kind      EventKind
	Time      time.Time
	Node      peer.ID // the client
	Supernode peer.ID
	Result    string
	Latency   time.Duration
}

func (c *Client) emit(e Event) {
	if c.observe != nil {
		e.Node = c.h.ID()
		c.observe(e)
	}
}
