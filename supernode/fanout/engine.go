package fanout

import (
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxJobs is the default bound on jobs in flight (see [WithMaxJobs]).
// Each job pins one frame until it finishes; with 64 KiB frames the default
// pins at most 16 MiB.
const DefaultMaxJobs = 256

// DefaultYieldEvery is the default number of Offers after which a worker
// yields its core (see [WithYieldEvery]).
const DefaultYieldEvery = 128

// Sink is a member's outbound queue, as the engine sees it.
//
// Offer must not block and must be safe for concurrent use (one sink may be
// a member of several groups or engines). It either enqueues frame and
// returns true, or returns false when the member's bounded queue is full or
// closed; the engine counts a false as a drop and never retries. Offer must
// not modify frame: the same slice is offered to every member. It may keep
// frame (without modifying it) for as long as it likes.
//
// [*Outbox] is the production implementation.
type Sink interface {
	Offer(frame []byte) bool
}

// Result reports one finished fanout job. Delivered + Dropped is the number
// of members the job was offered to (the group's size when Fanout was
// called).
type Result struct {
	// Delivered counts Offers that returned true.
	Delivered int
	// Dropped counts Offers that returned false (member queue full or
	// closed).
	Dropped int
}

// Option configures an [Engine].
type Option func(*options) error

type options struct {
	reg        prometheus.Registerer
	maxJobs    int
	yieldEvery int
	now        func() time.Time
}

// WithRegisterer registers the engine's metrics on reg (see the package
// documentation for the series). Without it the engine keeps its metrics
// unregistered. Two engines cannot share one registerer.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(o *options) error {
		if reg == nil {
			return fmt.Errorf("fanout: WithRegisterer: nil registerer")
		}
		o.reg = reg
		return nil
	}
}

// WithMaxJobs bounds the jobs in flight, queued or being offered, to n ≥ 1
// (default [DefaultMaxJobs]). Past it [Engine.Fanout] returns [ErrBusy]. The
// engine preallocates n job records and, per worker, a queue of n slots
// (8 bytes each).
func WithMaxJobs(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 1<<20 {
			return fmt.Errorf("fanout: WithMaxJobs(%d): want 1..%d", n, 1<<20)
		}
		o.maxJobs = n
		return nil
	}
}

// WithYieldEvery makes a worker call runtime.Gosched after every n ≥ 1
// Offers of a job, or never if n is 0 (default [DefaultYieldEvery]).
//
// Why: an Offer to an idle [Outbox] wakes its writer goroutine, which the Go
// scheduler queues on the worker's own P. Without yielding, a worker with
// 15,000 members wakes 15,000 writers that wait, and go cold in cache, until
// it has finished (or is preempted after 10 ms), and every other goroutine on
// that P waits too. Yielding every 128 Offers lets the woken writers (the
// P's local run queue holds 256) run while their data is still in cache, so
// members are written to while the worker is still offering, not after the
// whole partition. It costs one trip through the scheduler per n Offers. On the
// 2-core benchmark machine it made delivery to 30,000 Outbox members 32%
// faster end to end (31.3 → 21.5 ms); for 30,000 trivial in-memory sinks it
// cost between nothing measurable and 0.07 ms per message (see
// docs/BENCHMARKS.md). With Outboxes written by a [Writers] pool the yields
// let the pool's goroutines run while the workers are still offering: on the
// same machine, 30,000 pooled Outboxes took 10.7 ms per message with the
// default and 18.6 ms without yielding.
func WithYieldEvery(n int) Option {
	return func(o *options) error {
		if n < 0 {
			return fmt.Errorf("fanout: WithYieldEvery(%d): want ≥ 0", n)
		}
		o.yieldEvery = n
		return nil
	}
}

// WithClock sets the clock used for the latency histogram (default
// time.Now). It is read twice per job.
func WithClock(now func() time.Time) Option {
	return func(o *options) error {
		if now == nil {
			return fmt.Errorf("fanout: WithClock: nil clock")
		}
		o.now = now
		return nil
	}
}

// Engine fans frames out to the members of groups with a fixed pool of
// workers. It is safe for concurrent use.
type Engine struct {
	now        func() time.Time
	yieldEvery int // Offers between yields; math.MaxInt for never
	m          *metrics
	queues     []chan *job // one per worker, capacity maxJobs
	free       chan *job   // preallocated job records; empty means busy
	maxJobs    int

	mu    sync.RWMutex // guards state; Fanout holds it for reading while queueing
	state int
	wg    sync.WaitGroup
}

const (
	stateNew = iota
	stateRunning
	stateClosed
)

// job is one Fanout call in flight. Records are preallocated and recycled
// through Engine.free.
type job struct {
	frame     []byte
	snap      *snapshot
	done      func(Result)
	start     time.Time
	remaining atomic.Int32 // workers that have not finished this job
	delivered atomic.Int64
	dropped   atomic.Int64
}

// New returns an engine with the given number of workers; workers < 1 means
// runtime.GOMAXPROCS(0), one per core the scheduler uses. It allocates the
// job records and queues but starts nothing; call [Engine.Start].
func New(workers int, opts ...Option) (*Engine, error) {
	if workers < 1 {
		workers = runtime.GOMAXPROCS(0)
	}
	if workers > 1<<12 {
		return nil, fmt.Errorf("fanout: new: %d workers, want at most %d", workers, 1<<12)
	}
	o := options{maxJobs: DefaultMaxJobs, yieldEvery: DefaultYieldEvery, now: time.Now}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.yieldEvery == 0 {
		o.yieldEvery = math.MaxInt
	}
	e := &Engine{
		now:        o.now,
		yieldEvery: o.yieldEvery,
		queues:     make([]chan *job, workers),
		free:       make(chan *job, o.maxJobs),
		maxJobs:    o.maxJobs,
	}
	for i := range e.queues {
		e.queues[i] = make(chan *job, o.maxJobs)
	}
	jobs := make([]job, o.maxJobs)
	for i := range jobs {
		e.free <- &jobs[i]
	}
	e.m = newMetrics(func() float64 { return float64(e.InFlight()) })
	if err := e.m.register(o.reg); err != nil {
		return nil, err
	}
	return e, nil
}

// Workers returns the number of workers.
func (e *Engine) Workers() int { return len(e.queues) }

// InFlight returns the number of jobs queued or being offered.
func (e *Engine) InFlight() int { return e.maxJobs - len(e.free) }

// Start starts the workers. Calling it again, or after Close, does nothing.
func (e *Engine) Start() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state != stateNew {
		return
	}
	e.state = stateRunning
	e.wg.Add(len(e.queues))
	for w := range e.queues {
		go e.run(w)
	}
}

// Close stops accepting jobs, lets the workers finish every job already
// accepted (each done callback runs exactly once) and waits for the workers
// to exit. It is idempotent and safe to call concurrently, and on an engine
// that was never started. It must not be called from a done callback, which
// runs on a worker: it would wait for itself.
func (e *Engine) Close() {
	e.mu.Lock()
	if e.state != stateClosed {
		e.state = stateClosed
		for _, q := range e.queues {
			close(q)
		}
	}
	e.mu.Unlock()
	e.wg.Wait()
}

// Worker returns the worker that serves the member id, in [0, Workers()).
// It depends only on id and the number of workers, never on the process or
// the group, so a member is on the same worker in every group of an engine
// (and of any engine with as many workers).
func (e *Engine) Worker(id string) int {
	return partition(id, len(e.queues))
}

// partition maps id to [0, n): 64-bit FNV-1a over the bytes, a splitmix64
// finaliser so that the high bits depend on every byte (peer IDs share long
// prefixes), then a multiply-shift reduction (no modulo bias worth the name,
// no division).
func partition(id string, n int) int {
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	hi, _ := bits.Mul64(h, uint64(n))
	return int(hi)
}

// Fanout offers frame to every member of g, each member's Offer made by the
// worker that serves it. It returns as soon as the job is queued, without
// waiting for any Offer; slow members cannot block it because Offer does not
// block. done, if not nil, is called exactly once, on a worker goroutine,
// after the last Offer of the job; it must be quick, must not block, and must
// not call Close (it may call Fanout).
//
// Fanout never waits for a member and never allocates; it holds the
// engine's read lock and g's submit lock only while queueing one pointer per
// worker. It returns [ErrBusy] when the
// engine already has its maximum number of jobs in flight, [ErrNotStarted]
// before Start and [ErrClosed] after Close; in those cases nothing was
// queued and done will not be called. From the call on, frame belongs to
// the engine and the sinks: see "Frame ownership" in the package
// documentation. The members are those of g at the time of the call.
func (e *Engine) Fanout(g *Group, frame []byte, done func(Result)) error {
	if g == nil || g.e != e {
		return errForeignGroup
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	switch e.state {
	case stateNew:
		return ErrNotStarted
	case stateClosed:
		return ErrClosed
	}
	var j *job
	select {
	case j = <-e.free:
	default:
		e.m.refused.Inc()
		return ErrBusy
	}
	j.frame, j.done, j.start = frame, done, e.now()

	// Queue the job on every worker that has members of g. A job holds a
	// record from e.free until its last worker is done, and every queue has
	// maxJobs slots, so no queue ever holds more than maxJobs jobs and these
	// sends cannot block. The group's submit lock makes the sends for one
	// group atomic with respect to each other: every worker sees the group's
	// jobs in the same order.
	g.submit.Lock()
	snap := g.snap.Load()
	j.snap = snap
	n := int32(0)
	for _, p := range snap.parts {
		if len(p) > 0 {
			n++
		}
	}
	if n == 0 {
		// An empty group still reports through done, from a worker like
		// every other job.
		j.remaining.Store(1)
		e.queues[0] <- j
	} else {
		j.remaining.Store(n)
		for w, p := range snap.parts {
			if len(p) > 0 {
				e.queues[w] <- j
			}
		}
	}
	g.submit.Unlock()
	e.m.jobs.Inc()
	return nil
}

// run is worker w: it offers each queued job's frame to the members of its
// partition, in queue order, until Close closes its queue.
func (e *Engine) run(w int) {
	defer e.wg.Done()
	for j := range e.queues[w] {
		frame := j.frame
		var delivered, dropped int64
		untilYield := e.yieldEvery
		for _, s := range j.snap.parts[w] {
			if s.Offer(frame) {
				delivered++
			} else {
				dropped++
			}
			if untilYield--; untilYield == 0 {
				// Let the writers these Offers woke run (WithYieldEvery).
				runtime.Gosched()
				untilYield = e.yieldEvery
			}
		}
		if delivered != 0 {
			j.delivered.Add(delivered)
		}
		if dropped != 0 {
			j.dropped.Add(dropped)
		}
		if j.remaining.Add(-1) == 0 {
			e.finish(j)
		}
	}
}

// finish completes j on the worker that did its last offers: it records the
// metrics, recycles the record (dropping its references to the frame and
// the membership snapshot) and calls done.
func (e *Engine) finish(j *job) {
	r := Result{Delivered: int(j.delivered.Load()), Dropped: int(j.dropped.Load())}
	latency := e.now().Sub(j.start)
	done := j.done
	j.frame, j.snap, j.done, j.start = nil, nil, nil, time.Time{}
	j.delivered.Store(0)
	j.dropped.Store(0)
	e.free <- j // never blocks: free has room for every record
	e.m.jobDone(r, latency)
	if done != nil {
		done(r)
	}
}
