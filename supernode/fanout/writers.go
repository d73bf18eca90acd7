package fanout

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultStallCheck is the default interval of a [Writers] pool's watchdog:
// a pool goroutine found in the same Write at two consecutive checks (so
// blocked for between one and two intervals) is replaced.
const DefaultStallCheck = 10 * time.Millisecond

// WritersOption configures a [Writers] pool.
type WritersOption func(*Writers) error

// WithStallCheck drives the pool's watchdog with tick instead of a ticker
// of [DefaultStallCheck]: the watchdog checks the pool goroutines each time
// it receives from tick, and replaces one that is still inside the Write it
// was in at the previous check. Tests send on tick by hand.
func WithStallCheck(tick <-chan time.Time) WritersOption {
	return func(p *Writers) error {
		if tick == nil {
			return fmt.Errorf("fanout: WithStallCheck: nil channel")
		}
		p.tick = tick
		return nil
	}
}

// WithWritersRegisterer registers the pool's series on reg:
// overlayd_supernode_writers_goroutines (pool goroutines running, the size
// plus those handed off while blocked in a Write) and
// overlayd_supernode_writers_handoffs_total (goroutines the watchdog
// replaced because a member's Write blocked). Both are read from
// [Writers.Stats] at scrape time; the write path touches no Prometheus
// object.
func WithWritersRegisterer(reg prometheus.Registerer) WritersOption {
	return func(p *Writers) error {
		if reg == nil {
			return fmt.Errorf("fanout: WithWritersRegisterer: nil registerer")
		}
		for _, c := range []prometheus.Collector{
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "overlayd_supernode_writers_goroutines",
				Help: "Goroutines of the supernode's outbox writer pool: its size, plus those handed off while blocked in a Write to a member that does not read.",
			}, func() float64 { return float64(p.Stats().Goroutines) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "overlayd_supernode_writers_handoffs_total",
				Help: "Outbox writer goroutines the watchdog replaced because one member's Write blocked past two checks.",
			}, func() float64 { return float64(p.Stats().Handoffs) }),
		} {
			if err := reg.Register(c); err != nil {
				return fmt.Errorf("fanout: register writers metrics: %w", err)
			}
		}
		return nil
	}
}

// takeBatch is how many ready Outboxes a pool goroutine takes off a ready
// list at a time: fewer trips through the list's lock.
const takeBatch = 16

// Writers is a pool of writer goroutines shared by many [Outbox]es (see
// [WithWriters]), so that an idle member costs no goroutine and a fanout to
// thousands of members wakes a few pool goroutines instead of one goroutine
// per member.
//
// An Offer that makes an idle Outbox non-empty puts it on one of the pool's
// ready lists (at most once: the Outbox keeps a flag; each Outbox has its
// list, so that concurrent Offers seldom meet on one lock). A pool goroutine
// takes a few ready Outboxes at a time and gives each a turn: it writes one
// batch of the Outbox's queued frames (coalesced, see [WithCoalesce]) and,
// if more is queued, puts it back at the end of its list. Only the goroutine
// that took an Outbox writes for it until it puts it back, so each member's
// frames are written in order.
//
// Isolation: a Write may block for as long as the member does not read. A
// watchdog (like the Go runtime's sysmon for goroutines blocked in system
// calls) checks the pool goroutines every [DefaultStallCheck] (see
// [WithStallCheck]); one that is still in the Write it was in at the
// previous check leaves the pool: the Outboxes it had taken but not served
// go back on their ready lists, and a new goroutine takes its place. The one
// that left finishes its turn when its Write returns (or its Outbox is
// closed and its abort unblocks it) and exits. So a blocked member never
// holds up the others for more than two checks, and the pool runs at most
// its size plus one goroutine per member blocked in a Write at the time, no
// more than one goroutine per Outbox as without the pool.
//
// A pool is safe for concurrent use. [NewWriters] starts nothing; Start
// starts the goroutines and the watchdog, Close stops them.
type Writers struct {
	size       int
	tick       <-chan time.Time // nil until Start without WithStallCheck
	stopTicker func()
	lists      []readyList
	nextList   atomic.Uint32 // assigns Outboxes to lists, round robin
	closed     atomic.Bool
	// idle counts goroutines waiting on cond and not yet signalled; it is
	// changed under mu, read without it by push.
	idle atomic.Int32

	mu         sync.Mutex
	cond       sync.Cond // pool goroutines wait on it for a ready Outbox
	workers    []*poolWorker
	spare      []*writer // the scratch of goroutines that left, reused
	goroutines int       // pool goroutines running, replaced ones included
	handoffs   uint64
	started    bool
	quit       chan struct{}
	wg         sync.WaitGroup
}

// readyList is a FIFO of ready Outboxes linked through Outbox.next.
type readyList struct {
	mu         sync.Mutex
	head, tail *Outbox
	_          [40]byte // one list per cache line
}

// poolWorker is one pool goroutine.
type poolWorker struct {
	w    *writer
	home int // the ready list it looks at first

	// The Outboxes it has taken and not served yet: local[lo:hi], under
	// lmu (the watchdog puts them back if it replaces the goroutine).
	lmu    sync.Mutex
	local  [takeBatch]*Outbox
	lo, hi int

	seen     uint64      // w.writes at the previous check; under Writers.mu
	detached atomic.Bool // replaced: exit after the current turn
}

// NewWriters returns a pool of size goroutines; size < 1 means
// runtime.GOMAXPROCS(0). It starts nothing: call [Writers.Start]. Outboxes
// handed to it before Start wait on its ready lists.
func NewWriters(size int, opts ...WritersOption) (*Writers, error) {
	if size < 1 {
		size = runtime.GOMAXPROCS(0)
	}
	if size > 1<<12 {
		return nil, fmt.Errorf("fanout: new writers: %d goroutines, want at most %d", size, 1<<12)
	}
	p := &Writers{size: size, quit: make(chan struct{}), lists: make([]readyList, 2*size)}
	p.cond.L = &p.mu
	for _, opt := range opts {
		if err := opt(p); err != nil {
			return nil, err
		}
	}
	p.workers = make([]*poolWorker, 0, size)
	p.spare = make([]*writer, 0, size)
	return p, nil
}

// Start starts the pool goroutines and the watchdog. Calling it again, or
// after Close, does nothing.
func (p *Writers) Start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started || p.closed.Load() {
		return
	}
	p.started = true
	if p.tick == nil {
		t := time.NewTicker(DefaultStallCheck)
		p.tick, p.stopTicker = t.C, t.Stop
	}
	for range p.size {
		p.spawnLocked()
	}
	p.wg.Add(1)
	go p.watch()
}

// Close stops the pool: idle goroutines and the watchdog exit at once, busy
// ones after their current turn, and Close waits for all of them, including
// one blocked in a Write. Close the pool's Outboxes first (their aborts
// unblock such Writes); frames still queued in an open Outbox are never
// written after Close. It is idempotent and safe to call concurrently and on
// a pool never started.
func (p *Writers) Close() {
	p.mu.Lock()
	if !p.closed.Load() {
		p.closed.Store(true)
		close(p.quit)
		for i := range p.lists {
			l := &p.lists[i]
			l.mu.Lock()
			for o := l.head; o != nil; {
				o, o.next = o.next, nil
			}
			l.head, l.tail = nil, nil
			l.mu.Unlock()
		}
		p.cond.Broadcast()
	}
	p.mu.Unlock()
	p.wg.Wait()
	if p.stopTicker != nil {
		p.stopTicker()
	}
}

// WritersStats is a snapshot of a pool's state.
type WritersStats struct {
	// Size is the number of goroutines the pool keeps serving.
	Size int
	// Goroutines counts pool goroutines running: Size once started, plus
	// those replaced while blocked in a Write and not yet returned.
	Goroutines int
	// Handoffs counts goroutines replaced by the watchdog.
	Handoffs uint64
}

// Stats returns the pool's state.
func (p *Writers) Stats() WritersStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return WritersStats{Size: p.size, Goroutines: p.goroutines, Handoffs: p.handoffs}
}

// list assigns a new Outbox its ready list.
func (p *Writers) list() *readyList {
	return &p.lists[int(p.nextList.Add(1)-1)%len(p.lists)]
}

// push appends o to its ready list and wakes an idle goroutine if there is
// one. The caller has set o.sched, so o is on no list. It never allocates.
func (p *Writers) push(o *Outbox) {
	l := o.list
	l.mu.Lock()
	if p.closed.Load() {
		l.mu.Unlock()
		return
	}
	o.next = nil
	if l.tail == nil {
		l.head = o
	} else {
		l.tail.next = o
	}
	l.tail = o
	l.mu.Unlock()
	// A goroutine going idle counts itself before it looks at the lists
	// a last time, and this push looks at idle after queueing o: one of
	// the two sees the other.
	if p.idle.Load() > 0 {
		p.wakeOne()
	}
}

// wakeOne signals one idle goroutine, if any is still idle.
func (p *Writers) wakeOne() {
	p.mu.Lock()
	if p.idle.Load() > 0 {
		// Counted off here, not by the goroutine when it wakes, so that
		// the next push signals another one.
		p.idle.Add(-1)
		p.cond.Signal()
	}
	p.mu.Unlock()
}

// take moves up to takeBatch Outboxes from the first non-empty ready list,
// starting at from, into dst and returns how many.
func (p *Writers) take(from int, dst []*Outbox) int {
	for i := range p.lists {
		l := &p.lists[(from+i)%len(p.lists)]
		l.mu.Lock()
		k := 0
		for k < len(dst) && l.head != nil {
			o := l.head
			l.head, o.next = o.next, nil
			dst[k] = o
			k++
		}
		if l.head == nil {
			l.tail = nil
		}
		l.mu.Unlock()
		if k > 0 {
			return k
		}
	}
	return 0
}

// spawnLocked starts a pool goroutine, reusing the scratch of one that left.
func (p *Writers) spawnLocked() {
	var w *writer
	if k := len(p.spare); k > 0 {
		w = p.spare[k-1]
		p.spare[k-1] = nil
		p.spare = p.spare[:k-1]
	} else {
		w = newWriter(maxWriteBatch)
	}
	pw := &poolWorker{w: w, seen: w.writes.Load(), home: len(p.workers) * 2 % len(p.lists)}
	p.workers = append(p.workers, pw)
	p.goroutines++
	p.wg.Add(1)
	go p.run(pw)
}

// run is one pool goroutine: it takes turns on ready Outboxes until the pool
// closes or the watchdog replaces it.
func (p *Writers) run(pw *poolWorker) {
	defer p.wg.Done()
	for {
		pw.lmu.Lock()
		var o *Outbox
		if pw.lo < pw.hi {
			o = pw.local[pw.lo]
			pw.local[pw.lo] = nil
			pw.lo++
		}
		pw.lmu.Unlock()
		if o != nil {
			o.turn(pw.w)
			continue
		}
		if !p.refill(pw) {
			p.exit(pw)
			return
		}
	}
}

// refill waits until it has taken ready Outboxes into pw.local, or reports
// false if the goroutine must exit (the pool closed, or it was replaced).
func (p *Writers) refill(pw *poolWorker) bool {
	var got [takeBatch]*Outbox
	for {
		if pw.detached.Load() || p.closed.Load() {
			return false
		}
		if k := p.take(pw.home, got[:]); k > 0 {
			pw.lmu.Lock()
			pw.lo, pw.hi = 0, copy(pw.local[:], got[:k])
			pw.lmu.Unlock()
			return true
		}
		p.mu.Lock()
		p.idle.Add(1)
		if k := p.take(pw.home, got[:]); k > 0 || pw.detached.Load() || p.closed.Load() {
			// No push can have counted this goroutine off: that
			// takes mu.
			p.idle.Add(-1)
			p.mu.Unlock()
			if k > 0 {
				pw.lmu.Lock()
				pw.lo, pw.hi = 0, copy(pw.local[:], got[:k])
				pw.lmu.Unlock()
				return true
			}
			return false
		}
		p.cond.Wait()
		p.mu.Unlock()
	}
}

// exit is a pool goroutine's last step.
func (p *Writers) exit(pw *poolWorker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.goroutines--
	if pw.detached.Load() && len(p.spare) < cap(p.spare) {
		p.spare = append(p.spare, pw.w)
	}
}

// watch is the watchdog goroutine.
func (p *Writers) watch() {
	defer p.wg.Done()
	for {
		select {
		case <-p.tick:
			p.check()
		case <-p.quit:
			return
		}
	}
}

// check replaces every pool goroutine that is in the same Write as at the
// previous check: it leaves the pool (it exits when that Write returns and
// its turn ends), the Outboxes it had taken go back on their ready lists,
// and a new goroutine serves the lists instead.
func (p *Writers) check() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() {
		return
	}
	for i := 0; i < len(p.workers); {
		pw := p.workers[i]
		n := pw.w.writes.Load()
		if n&1 == 0 || n != pw.seen {
			pw.seen = n
			i++
			continue
		}
		pw.detached.Store(true)
		last := len(p.workers) - 1
		p.workers[i], p.workers[last] = p.workers[last], nil
		p.workers = p.workers[:last]
		p.handoffs++
		pw.lmu.Lock()
		back := pw.local[pw.lo:pw.hi]
		pw.lo, pw.hi = 0, 0
		for j, o := range back {
			back[j] = nil
			p.requeue(o)
		}
		pw.lmu.Unlock()
		p.spawnLocked()
	}
}

// requeue puts o back on its ready list, at the front: it was taken before
// everything there.
func (p *Writers) requeue(o *Outbox) {
	l := o.list
	l.mu.Lock()
	o.next = l.head
	l.head = o
	if l.tail == nil {
		l.tail = o
	}
	l.mu.Unlock()
}
