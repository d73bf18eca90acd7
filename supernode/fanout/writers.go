package fanout

import (
	"fmt"
	"runtime"
	"sync"
	"time"
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

// Writers is a pool of writer goroutines shared by many [Outbox]es (see
// [WithWriters]), so that an idle member costs no goroutine and a fanout to
// thousands of members wakes a few pool goroutines instead of one goroutine
// per member.
//
// An Offer that makes an idle Outbox non-empty puts it on the pool's ready
// list (at most once: the Outbox keeps a flag). A pool goroutine takes the
// first ready Outbox, writes one batch of its queued frames (coalesced, see
// [WithCoalesce]) and, if more is queued, puts it back at the end of the
// list. Only the goroutine that took an Outbox writes for it until it puts
// it back, so each member's frames are written in order.
//
// Isolation: a Write may block for as long as the member does not read. A
// watchdog (like the Go runtime's sysmon for goroutines blocked in system
// calls) checks the pool goroutines every [DefaultStallCheck] (see
// [WithStallCheck]); one that is still in the Write it was in at the
// previous check leaves the pool, and a new goroutine takes its place. The
// one that left finishes its turn when its Write returns (or its Outbox is
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

	mu         sync.Mutex
	cond       sync.Cond // pool goroutines wait on it for a ready Outbox
	head, tail *Outbox   // the ready list, linked through Outbox.next
	idle       int       // goroutines waiting on cond and not yet signalled
	workers    []*poolWorker
	spare      []*writer // the scratch of goroutines that left, reused
	goroutines int       // pool goroutines running, replaced ones included
	handoffs   uint64
	started    bool
	closed     bool
	quit       chan struct{}
	wg         sync.WaitGroup
}

// poolWorker is one pool goroutine as the watchdog sees it.
type poolWorker struct {
	w        *writer
	seen     uint64 // w.writes at the previous check; under Writers.mu
	detached bool   // replaced: exit after the current turn; under Writers.mu
}

// NewWriters returns a pool of size goroutines; size < 1 means
// runtime.GOMAXPROCS(0). It starts nothing: call [Writers.Start]. Outboxes
// handed to it before Start wait on its ready list.
func NewWriters(size int, opts ...WritersOption) (*Writers, error) {
	if size < 1 {
		size = runtime.GOMAXPROCS(0)
	}
	if size > 1<<12 {
		return nil, fmt.Errorf("fanout: new writers: %d goroutines, want at most %d", size, 1<<12)
	}
	p := &Writers{size: size, quit: make(chan struct{})}
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
	if p.started || p.closed {
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
	if !p.closed {
		p.closed = true
		close(p.quit)
		for o := p.head; o != nil; {
			o, o.next = o.next, nil
		}
		p.head, p.tail = nil, nil
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

// push appends o to the ready list and wakes an idle goroutine if there is
// one. The caller has set o.sched, so o is not on the list. It never blocks
// for long and never allocates.
func (p *Writers) push(o *Outbox) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	if p.tail == nil {
		p.head = o
	} else {
		p.tail.next = o
	}
	p.tail = o
	wake := p.idle > 0
	if wake {
		// Counted off here, not by the goroutine when it wakes, so that
		// the next push signals another one.
		p.idle--
	}
	p.mu.Unlock()
	if wake {
		p.cond.Signal()
	}
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
	pw := &poolWorker{w: w, seen: w.writes.Load()}
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
		o := p.next(pw)
		if o == nil {
			return
		}
		o.turn(pw.w)
	}
}

// next waits for a ready Outbox and takes it off the list, or returns nil
// if the goroutine must exit (the pool closed, or it was replaced).
func (p *Writers) next(pw *poolWorker) *Outbox {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if pw.detached || p.closed {
			p.goroutines--
			if pw.detached && len(p.spare) < cap(p.spare) {
				p.spare = append(p.spare, pw.w)
			}
			return nil
		}
		if o := p.head; o != nil {
			p.head, o.next = o.next, nil
			if p.head == nil {
				p.tail = nil
			}
			return o
		}
		p.idle++
		p.cond.Wait()
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
// its turn ends) and a new goroutine serves the ready list instead.
func (p *Writers) check() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
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
		pw.detached = true
		last := len(p.workers) - 1
		p.workers[i], p.workers[last] = p.workers[last], nil
		p.workers = p.workers[:last]
		p.handoffs++
		p.spawnLocked()
	}
}
