package fanout

import (
	"fmt"
	"io"
	"math/bits"
	"sync"
	"sync/atomic"
)

// maxWriteBatch bounds how many queued frames a writer copies out under
// the lock at a time (one turn of a pool goroutine).
const maxWriteBatch = 64

// DefaultCoalesceBytes is the default bound on the bytes of one coalesced
// Write (see [WithCoalesce]).
const DefaultCoalesceBytes = 64 << 10

// OutboxOption configures an [Outbox].
type OutboxOption func(*Outbox) error

// WithGapFrame sets the function that makes the gap notice: after the
// Outbox has dropped frames, its writer calls gap(dropped) once, at the
// position of the missing frames (after every frame queued before the drops
// and before every frame queued after them), and writes the result as one
// frame (possibly in the same Write as its neighbours, see [WithCoalesce]).
// dropped is the number of consecutive frames missed, ≥ 1. gap runs on the
// writer goroutine (a pool goroutine with [WithWriters]), without the
// Outbox's lock, and must be quick; a nil or empty result writes nothing.
// Without this option drops are only counted.
func WithGapFrame(gap func(dropped uint64) []byte) OutboxOption {
	return func(o *Outbox) error {
		if gap == nil {
			return fmt.Errorf("fanout: WithGapFrame: nil function")
		}
		o.gap = gap
		return nil
	}
}

// WithAbort sets a function that [Outbox.Close] calls (once) after
// discarding the queue and before waiting for the writer, to unblock a Write
// in progress: for a libp2p stream pass its Reset, for a net.Conn its Close.
// Without it, Close waits for a blocked Write to return on its own (for
// example at the writer's deadline).
func WithAbort(abort func()) OutboxOption {
	return func(o *Outbox) error {
		if abort == nil {
			return fmt.Errorf("fanout: WithAbort: nil function")
		}
		o.abort = abort
		return nil
	}
}

// WithByteLimit bounds the bytes of the frames an Outbox holds (counting
// those being written) as well as their number: an Offer that would take the
// queue past n bytes is dropped like one past the frame limit (newest
// dropped, then a gap notice). n ≥ 1; a frame larger than n is always
// dropped. Without this option only frames are counted.
func WithByteLimit(n int) OutboxOption {
	return func(o *Outbox) error {
		if n < 1 {
			return fmt.Errorf("fanout: WithByteLimit: %d bytes, want ≥ 1", n)
		}
		o.byteLimit = n
		return nil
	}
}

// WithDropCounters makes the Outbox also add each dropped frame to frames
// (dropped at the frame limit, or while closed or failed) or bytes (dropped
// at the byte limit): counters an owner shares between its outboxes to count
// drops by reason without visiting them. Either may be nil.
func WithDropCounters(frames, bytes *atomic.Uint64) OutboxOption {
	return func(o *Outbox) error {
		o.dropFrames, o.dropBytes = frames, bytes
		return nil
	}
}

// WithCoalesce bounds a coalesced Write to n bytes (default
// [DefaultCoalesceBytes]). A writer that finds several frames queued copies
// as many of them as fit in n bytes, in order and with their gap notices in
// place, into a buffer of its own and writes them in one Write call: one
// system call instead of one per frame when w is a socket or a stream. A
// frame larger than n is written on its own, without a copy, and so is a
// frame that finds no other queued. n = 0 writes every frame (and gap notice)
// in a Write of its own.
//
// The buffer belongs to the writer: with [WithWriters] to the pool goroutine,
// shared by every Outbox it serves; without, to this Outbox. It grows to the
// largest coalesced Write so far (a power of two, at most n) and is then
// reused, so the steady state allocates nothing.
func WithCoalesce(n int) OutboxOption {
	return func(o *Outbox) error {
		if n < 0 {
			return fmt.Errorf("fanout: WithCoalesce: %d bytes, want ≥ 0", n)
		}
		o.coalesce = n
		return nil
	}
}

// WithWriters makes the Outbox written by the shared pool p instead of a
// goroutine of its own (see [Writers]): its Start starts nothing, and an
// Offer that makes it non-empty puts it on p's ready list. p must outlive
// the Outbox: close the Outbox before p.
func WithWriters(p *Writers) OutboxOption {
	return func(o *Outbox) error {
		if p == nil {
			return fmt.Errorf("fanout: WithWriters: nil pool")
		}
		o.pool = p
		return nil
	}
}

// Outbox is a member's bounded outbound queue: a [Sink] whose frames are
// written to an io.Writer in Offer order, by a writer goroutine of its own or,
// with [WithWriters], by a shared pool of writer goroutines. A writer that
// finds several frames queued writes them in one Write call (see
// [WithCoalesce]).
//
// Overflow policy: drop newest, then tell. The Outbox holds at most limit
// frames, counting those its writer is writing, and with [WithByteLimit] at
// most that many bytes of them. An Offer to a full Outbox
// returns false at once and counts the frame as dropped; it never blocks and
// never allocates. When the writer has written every frame queued before a
// run of drops, it writes a gap notice for that run (see [WithGapFrame])
// before any newer frame. So a member whose stream is slow, or never read,
// costs at most limit frame references and a counter, delays no other member
// and never blocks the fanout workers.
//
// A Write error stops the writer: queued frames are discarded, later Offers
// return false and [Outbox.Err] reports the error.
//
// The Outbox does not own w; it never closes it (see [WithAbort]).
type Outbox struct {
	w     io.Writer
	gap   func(dropped uint64) []byte
	abort func()
	// byteLimit bounds bytes (0: no bound); dropFrames and dropBytes are
	// the owner's shared counters (WithDropCounters), possibly nil.
	byteLimit             int
	dropFrames, dropBytes *atomic.Uint64
	coalesce              int      // bytes per coalesced Write; 0: one Write per frame
	pool                  *Writers // nil: a writer goroutine of its own

	wake   chan struct{} // own writer: capacity 1; signalled when the queue becomes non-empty and on Close
	exited chan struct{} // closed when the writer has stopped (see Done)

	closeOnce sync.Once

	mu         sync.Mutex
	ring       []queued // fixed, len == limit
	head, n    int      // n counts frames queued or being written
	bytes      int      // bytes of those n frames
	pendingGap uint64   // drops after every queued frame, not yet told
	started    bool
	stopped    bool // closed or failed: Offer refuses
	err        error
	dropped    uint64
	droppedB   uint64 // of dropped, those refused at the byte limit
	// With a pool: sched is set while the Outbox is on the pool's ready
	// list or held by a pool goroutine (so it is on the list at most
	// once), held while a pool goroutine writes its frames, doneClosed
	// once exited is closed.
	sched, held, doneClosed bool

	list *readyList // its ready list in the pool
	next *Outbox    // next on that list, guarded by list.mu

	written atomic.Uint64
	gaps    atomic.Uint64
}

// queued is one ring slot: a frame and the number of frames dropped just
// before it (0 if none).
type queued struct {
	frame []byte
	gap   uint64
}

var _ Sink = (*Outbox)(nil)

// NewOutbox returns an Outbox of at most limit ≥ 1 frames writing to w. It
// allocates the queue but starts nothing: call [Outbox.Start]. Frames offered
// before Start are queued.
func NewOutbox(limit int, w io.Writer, opts ...OutboxOption) (*Outbox, error) {
	if limit < 1 {
		return nil, fmt.Errorf("fanout: new outbox: limit %d, want ≥ 1", limit)
	}
	if w == nil {
		return nil, fmt.Errorf("fanout: new outbox: nil writer")
	}
	o := &Outbox{
		w:        w,
		ring:     make([]queued, limit),
		exited:   make(chan struct{}),
		coalesce: DefaultCoalesceBytes,
	}
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	if o.pool == nil {
		o.wake = make(chan struct{}, 1)
	} else {
		o.list = o.pool.list()
	}
	return o, nil
}

// Start starts the writer goroutine or, with [WithWriters], hands the
// Outbox to the pool if frames are queued. Calling it again, or after Close,
// does nothing.
func (o *Outbox) Start() {
	o.mu.Lock()
	if o.started || o.stopped {
		o.mu.Unlock()
		return
	}
	o.started = true
	if o.pool == nil {
		o.mu.Unlock()
		go o.run()
		return
	}
	ready := o.n > 0 || o.pendingGap > 0
	o.sched = ready
	o.mu.Unlock()
	if ready {
		o.pool.push(o)
	}
}

// Offer implements [Sink]: it queues frame and returns true, or returns
// false if the Outbox is full (counted as a drop, told later by a gap
// notice), closed or failed. It never blocks on the writer and never
// allocates. Offer does not modify frame; the Outbox keeps it until written.
func (o *Outbox) Offer(frame []byte) bool {
	o.mu.Lock()
	if o.stopped {
		o.mu.Unlock()
		return false
	}
	if o.n == len(o.ring) {
		o.dropped++
		o.pendingGap++
		o.mu.Unlock()
		if o.dropFrames != nil {
			o.dropFrames.Add(1)
		}
		return false
	}
	if o.byteLimit > 0 && o.bytes+len(frame) > o.byteLimit {
		o.dropped++
		o.droppedB++
		o.pendingGap++
		o.mu.Unlock()
		if o.dropBytes != nil {
			o.dropBytes.Add(1)
		}
		return false
	}
	i := o.head + o.n
	if i >= len(o.ring) {
		i -= len(o.ring)
	}
	o.ring[i] = queued{frame: frame, gap: o.pendingGap}
	o.pendingGap = 0
	o.n++
	o.bytes += len(frame)
	if o.pool != nil {
		// The pool goroutine that holds the Outbox, or will, takes
		// this frame too; only an idle started Outbox needs queueing.
		ready := o.started && !o.sched
		o.sched = o.sched || ready
		o.mu.Unlock()
		if ready {
			o.pool.push(o)
		}
		return true
	}
	wake := o.n == 1
	o.mu.Unlock()
	if wake {
		// The writer only sleeps after finding n == 0, so only the Offer
		// that makes the queue non-empty needs to wake it.
		o.signal()
	}
	return true
}

// signal wakes the own writer if it sleeps, or makes its next sleep return
// at once. It never blocks: a pending token is enough.
func (o *Outbox) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Close stops the Outbox: later Offers return false, queued frames are
// discarded, the abort function (see [WithAbort]) is called, and Close waits
// for the writer to stop, which includes any Write in progress (with
// [WithWriters]: until no pool goroutine is writing for this Outbox). It is
// idempotent and safe to call concurrently and on an Outbox never started.
func (o *Outbox) Close() {
	o.closeOnce.Do(func() {
		o.mu.Lock()
		o.stopLocked()
		if o.pool != nil && o.started && !o.held {
			// No pool goroutine writes for it, and none will: one
			// that takes it off the ready list later finds it stopped.
			o.closeDoneLocked()
		}
		o.mu.Unlock()
		if o.pool == nil {
			o.signal()
		}
		if o.abort != nil {
			o.abort()
		}
	})
	o.mu.Lock()
	started := o.started
	o.mu.Unlock()
	if started {
		<-o.exited
	}
}

// stopLocked refuses further Offers and drops the queued frames. The
// writer's current batch is its own copy; it notices stopped when it comes
// back for the lock.
func (o *Outbox) stopLocked() {
	o.stopped = true
	clear(o.ring)
	o.head, o.n, o.pendingGap, o.bytes = 0, 0, 0, 0
}

// closeDoneLocked closes exited once (pooled Outboxes; the own writer
// closes it when it returns).
func (o *Outbox) closeDoneLocked() {
	if !o.doneClosed {
		o.doneClosed = true
		close(o.exited)
	}
}

// Done returns a channel that is closed when the writer has stopped, after a
// Write error (see [Outbox.Err]) or Close: the own writer goroutine has
// returned or, with [WithWriters], no pool goroutine is writing for this
// Outbox. The owner can select on it to notice a failed stream and remove
// the member. It is never closed if Start was not called.
func (o *Outbox) Done() <-chan struct{} { return o.exited }

// Err returns the Write error that stopped the writer, or nil.
func (o *Outbox) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// OutboxStats is a snapshot of an Outbox's counters.
type OutboxStats struct {
	// Queued is the number of frames held, including those being written;
	// it never exceeds the limit.
	Queued int
	// QueuedBytes is the bytes of those frames; it never exceeds ByteLimit
	// when there is one.
	QueuedBytes int
	// Limit is the Outbox's bound in frames, ByteLimit in bytes (0: none).
	Limit, ByteLimit int
	// Dropped counts frames refused because the Outbox was full (in
	// frames or in bytes); DroppedBytes counts those of them refused at
	// the byte limit.
	Dropped, DroppedBytes uint64
	// Written counts frames written (gap notices excluded), however many
	// Write calls they took.
	Written uint64
	// Gaps counts gap notices written.
	Gaps uint64
}

// Stats returns the Outbox's counters.
func (o *Outbox) Stats() OutboxStats {
	o.mu.Lock()
	s := OutboxStats{Queued: o.n, QueuedBytes: o.bytes, Limit: len(o.ring), ByteLimit: o.byteLimit, Dropped: o.dropped, DroppedBytes: o.droppedB}
	o.mu.Unlock()
	s.Written = o.written.Load()
	s.Gaps = o.gaps.Load()
	return s
}

// run is the Outbox's own writer goroutine. It takes the lock twice per
// batch of up to maxWriteBatch frames: to copy the batch out and to free its
// slots (and look for more).
func (o *Outbox) run() {
	defer close(o.exited)
	w := newWriter(min(len(o.ring), maxWriteBatch))
	o.mu.Lock()
	for {
		for o.n == 0 && o.pendingGap == 0 && !o.stopped {
			o.mu.Unlock()
			<-o.wake
			o.mu.Lock()
		}
		if o.stopped {
			o.mu.Unlock()
			return
		}
		k, gap := o.takeLocked(w)
		o.mu.Unlock()
		frameBytes, err := o.writeTaken(w, k, gap)
		o.mu.Lock()
		if !o.releaseLocked(k, frameBytes, err) {
			o.mu.Unlock()
			return
		}
	}
}

// turn is a pool goroutine's turn on a ready Outbox: one batch of up to
// maxWriteBatch frames, then back on the pool's ready list (at its end) if
// more is queued, so that a busy member does not keep a pool goroutine from
// the others.
func (o *Outbox) turn(w *writer) {
	o.mu.Lock()
	if o.stopped || (o.n == 0 && o.pendingGap == 0) {
		// Closed while on the ready list: Close has closed exited.
		o.sched = false
		o.mu.Unlock()
		return
	}
	o.held = true
	k, gap := o.takeLocked(w)
	o.mu.Unlock()
	frameBytes, err := o.writeTaken(w, k, gap)
	o.mu.Lock()
	o.held = false
	if !o.releaseLocked(k, frameBytes, err) {
		o.closeDoneLocked()
		o.mu.Unlock()
		return
	}
	more := o.n > 0 || o.pendingGap > 0
	o.sched = more
	o.mu.Unlock()
	if more {
		o.pool.push(o)
	}
}

// takeLocked copies the next contiguous run of queued frames, at most
// len(w.batch), into w.batch and returns how many it took; with no frame
// queued it takes the pending gap instead (drops after everything queued
// was written: told now rather than before the next frame, which may never
// come). The frames' slots stay occupied (counted in n and bytes) until
// releaseLocked, so the queue never holds more than its limits.
func (o *Outbox) takeLocked(w *writer) (k int, gap uint64) {
	if o.n == 0 {
		gap = o.pendingGap
		o.pendingGap = 0
		return 0, gap
	}
	return copy(w.batch, o.ring[o.head:min(o.head+o.n, len(o.ring))]), 0
}

// releaseLocked frees the k slots just written (frameBytes bytes) or, after
// a Write error, stops the Outbox. It reports whether the writer may go on:
// false once the Outbox is stopped (by this error, an earlier one or Close).
func (o *Outbox) releaseLocked(k, frameBytes int, err error) bool {
	if err != nil && !o.stopped {
		o.err = fmt.Errorf("fanout: outbox write: %w", err)
		o.stopLocked()
	}
	if o.stopped {
		return false
	}
	clear(o.ring[o.head : o.head+k])
	o.head += k
	if o.head == len(o.ring) {
		o.head = 0
	}
	o.n -= k
	o.bytes -= frameBytes
	return true
}

// writeTaken writes what takeLocked took: gap (if not 0), then the k frames
// of w.batch, each preceded by its gap notice, coalesced into as few Writes
// as o.coalesce allows. It returns the bytes of the k frames and the Write
// error, if any. Written and Gaps count what each successful Write carried.
func (o *Outbox) writeTaken(w *writer, k int, gap uint64) (frameBytes int, err error) {
	segs := w.segs[:0]
	if gap > 0 {
		if f := o.gapFrame(gap); len(f) > 0 {
			segs = append(segs, segment{b: f, gap: true})
		}
	}
	for i := range w.batch[:k] {
		q := w.batch[i]
		w.batch[i] = queued{}
		if q.gap > 0 {
			if f := o.gapFrame(q.gap); len(f) > 0 {
				segs = append(segs, segment{b: f, gap: true})
			}
		}
		segs = append(segs, segment{b: q.frame})
		frameBytes += len(q.frame)
	}
	err = o.writeSegs(w, segs)
	clear(segs) // the writer keeps no frame alive
	w.segs = segs[:0]
	return frameBytes, err
}

func (o *Outbox) gapFrame(dropped uint64) []byte {
	if o.gap == nil {
		return nil
	}
	return o.gap(dropped)
}

// writeSegs writes segs in order: each run of consecutive segments whose
// bytes fit in o.coalesce is copied into w.buf and written in one Write; a
// run of one segment (alone, or too large to share) is written without a
// copy.
func (o *Outbox) writeSegs(w *writer, segs []segment) error {
	for i := 0; i < len(segs); {
		j, size := i+1, len(segs[i].b)
		for j < len(segs) && size+len(segs[j].b) <= o.coalesce {
			size += len(segs[j].b)
			j++
		}
		p := segs[i].b
		if j > i+1 {
			p = w.fill(segs[i:j], size, o.coalesce)
		}
		w.writes.Add(1) // odd: in Write (the pool's watchdog looks)
		_, err := o.w.Write(p)
		w.writes.Add(1)
		if err != nil {
			return err
		}
		var frames, gaps uint64
		for _, s := range segs[i:j] {
			if s.gap {
				gaps++
			} else {
				frames++
			}
		}
		o.written.Add(frames)
		if gaps > 0 {
			o.gaps.Add(gaps)
		}
		i = j
	}
	return nil
}

// writer is the scratch state of one writer goroutine (an Outbox's own, or
// a pool goroutine's), reused for every batch so that writing allocates
// nothing in the steady state.
type writer struct {
	batch []queued  // frames copied out of the ring
	segs  []segment // the batch with its gap notices, in write order
	buf   []byte    // coalescing buffer; grows to the largest Write, then stays
	// writes counts Write calls begun and finished: odd while one is in
	// progress. The pool's watchdog compares it between two ticks.
	writes atomic.Uint64
}

// segment is one frame or gap notice to write.
type segment struct {
	b   []byte
	gap bool
}

func newWriter(batch int) *writer {
	return &writer{batch: make([]queued, batch), segs: make([]segment, 0, 2*batch)}
}

// fill copies segs (size bytes, size ≤ limit) into the writer's buffer and
// returns it. The buffer grows to a power of two, at most limit.
func (w *writer) fill(segs []segment, size, limit int) []byte {
	if cap(w.buf) < size {
		w.buf = make([]byte, 0, min(limit, 1<<bits.Len(uint(size-1))))
	}
	p := w.buf[:0]
	for _, s := range segs {
		p = append(p, s.b...)
	}
	return p
}
