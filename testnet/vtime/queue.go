// Package vtime is the event queue of the testnet's virtual-time models
// (testnet/sim, testnet/dircost): a binary min-heap ordered by virtual
// time and, for events due at the same time, by the order they were
// scheduled in. Those two keys decide the order completely, so a model
// driven from one queue and one seeded source of randomness replays a
// seed byte for byte.
//
// The queue holds events by value: once its slice has grown, scheduling
// allocates nothing, which matters to a model of a million clients.
package vtime

// Queue is a min-heap of events of type E by (at, scheduling order).
// The zero value is an empty queue.
type Queue[E any] struct {
	h   []entry[E]
	seq uint64
}

type entry[E any] struct {
	at  int64  // virtual nanoseconds
	seq uint64 // scheduling order: ties run first-scheduled first
	ev  E
}

func (a *entry[E]) less(b *entry[E]) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

// Push schedules ev at virtual time at (nanoseconds).
func (q *Queue[E]) Push(at int64, ev E) {
	q.seq++
	q.h = append(q.h, entry[E]{at: at, seq: q.seq, ev: ev})
	i := len(q.h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q.h[i].less(&q.h[p]) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

// Pop removes and returns the earliest event and its time. The queue
// must not be empty.
func (q *Queue[E]) Pop() (int64, E) {
	top := q.h[0]
	n := len(q.h) - 1
	q.h[0] = q.h[n]
	q.h = q.h[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q.h[r].less(&q.h[l]) {
			m = r
		}
		if !q.h[m].less(&q.h[i]) {
			break
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
	return top.at, top.ev
}

// NextAt returns the time of the earliest event. The queue must not be
// empty.
func (q *Queue[E]) NextAt() int64 { return q.h[0].at }

// Len returns how many events are scheduled.
func (q *Queue[E]) Len() int { return len(q.h) }
