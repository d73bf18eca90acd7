package testnet

import (
	"slices"
	"sync"
	"time"

	"github.com/overlayd/overlayd/node/client"
)

// attemptLog records the time and outcome of every client attach attempt,
// for the storm scenario's peak-window and answered-refusal figures.
type attemptLog struct {
	mu  sync.Mutex
	all []attempt
	// ready are the times clients were ready for their first pass
	// (client.EventReady).
	ready []time.Time
}

type attempt struct {
	t      time.Time
	failed bool // no answer: a stream or connection error
}

func (a *attemptLog) observe(e client.Event) {
	if e.Kind == client.EventReady {
		a.mu.Lock()
		a.ready = append(a.ready, e.Time)
		a.mu.Unlock()
		return
	}
	if e.Kind != client.EventAttempt {
		return
	}
	a.mu.Lock()
	// The attempt began Latency before its answer.
	a.all = append(a.all, attempt{t: e.Time.Add(-e.Latency), failed: e.Result == "error"})
	a.mu.Unlock()
}

// readySince counts the clients that became ready for their first pass
// from t on.
func (a *attemptLog) readySince(t time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, r := range a.ready {
		if !r.Before(t) {
			n++
		}
	}
	return n
}

// AttemptStats summarises the clients' attach attempts of a period.
type AttemptStats struct {
	// Attempts counts them; Failed those that got no answer (a stream or
	// connection error).
	Attempts, Failed int
	// Peak is the most attempts in any window of the given length.
	Peak int
}

// since summarises the attempts from t on, with the peak in windows of w.
func (a *attemptLog) since(t time.Time, w time.Duration) AttemptStats {
	a.mu.Lock()
	var ts []time.Time
	var s AttemptStats
	for _, at := range a.all {
		if at.t.Before(t) {
			continue
		}
		ts = append(ts, at.t)
		if at.failed {
			s.Failed++
		}
	}
	a.mu.Unlock()
	s.Attempts = len(ts)
	slices.SortFunc(ts, func(x, y time.Time) int { return x.Compare(y) })
	lo := 0
	for hi := range ts {
		for ts[hi].Sub(ts[lo]) >= w {
			lo++
		}
		s.Peak = max(s.Peak, hi-lo+1)
	}
	return s
}

// Attempts summarises the clients' attach attempts from t on, with the
// peak in windows of w: how the storm scenario sees the reconnect wave.
func (n *Network) Attempts(t time.Time, w time.Duration) AttemptStats {
	return n.attempts.since(t, w)
}
