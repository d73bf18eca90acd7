package dircost

import (
	"time"

	"github.com/overlayd/overlayd/testnet/vtime"
)

// epoch is the model's virtual time 0, a fixed date (the simulator's, so
// signed announcements and certificates carry the same times as there).
func epoch() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

// kind is what an event of the model does.
type kind uint8

const (
	evAnnounce    kind = iota + 1 // an announcer announces
	evViewRefresh                 // a client refreshes its view
	evViewCheck                   // a client's cross-check is answered
)

// event is one scheduled action of the model, held by value in the
// vtime queue.
type event struct {
	at  int64 // virtual nanoseconds
	k   kind
	a   int32  // the announcer, the client, or the supernode a copy reaches
	b   int32  // the supernode a copy came from
	gen uint32 // 0 until an announcer's first announcement
}

// schedule queues e at its time.
func schedule(q *vtime.Queue[event], e event) { q.Push(e.at, e) }
