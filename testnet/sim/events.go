package sim

// kind is what an event does.
type kind uint8

const (
	evPass        kind = iota + 1 // a client starts a failover pass
	evArrive                      // an attach request reaches a supernode
	evAnswer                      // the answer (or the failure) reaches the client
	evSessionDead                 // a client declares its supernode dead
	evReturn                      // an attached client away from home looks for room there
	evAnnounce                    // a supernode announces
	evHealth                      // a supernode's overload check (every keepalive)
	evRelease                     // a supernode frees the slot of a session nobody uses
	evDirTick                     // the directory expires entries, the ring is rebuilt
	evSample                      // the report samples the network
	evCrash                       // the scenario crashes supernodes
	evRestart                     // a client process restarts (restart-wave)
	evHandBack                    // the crashed supernodes restart
	evDemote                      // the operator demotes the megas
	evDrainStep                   // a demoted mega hands back one step's clients
	evRoleEval                    // an auto node evaluates its role (autoroles.go)
	evAutoDrain                   // a demoting auto supernode hands back one step's clients
)

// event is one scheduled action. It is a small value: the heap holds
// events by value, so scheduling allocates nothing once the heap has
// grown. gen invalidates events of a client (or supernode incarnation)
// whose state moved on.
type event struct {
	at  int64  // virtual nanoseconds
	seq uint64 // scheduling order: ties run first-scheduled first
	k   kind
	st  uint8 // answer status
	a   int32 // client, or supernode for supernode events
	b   int32 // supernode
	gen uint32
}

func (e *event) less(o *event) bool {
	if e.at != o.at {
		return e.at < o.at
	}
	return e.seq < o.seq
}

// queue is a binary min-heap of events, by (at, seq).
type queue struct {
	h   []event
	seq uint64
}

func (q *queue) push(e event) {
	q.seq++
	e.seq = q.seq
	q.h = append(q.h, e)
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

func (q *queue) pop() event {
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
	return top
}

func (q *queue) len() int { return len(q.h) }
