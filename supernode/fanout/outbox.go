package fanout

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// maxWriteBatch bounds how many queued frames the writer copies out under
// the lock at a time.
const maxWriteBatch = 64

// OutboxOption configures an [Outbox].
type OutboxOption func(*Outbox) error

// WithGapFrame sets the function that makes the gap notice: after the
// Outbox has dropped frames, its writer calls gap(dropped) once, at the
// position of the missing frames (after every frame queued before the drops
// and before every frame queued after them), and writes the result as one
// frame. dropped is the number of consecutive frames missed, ≥ 1. gap runs on
// the writer goroutine, without the Outbox's lock; a nil or empty result
// writes nothing. Without this option drops are only counted.
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

// Outbox is a member's bounded outbound queue: a [Sink] whose frames one
// writer goroutine writes to an io.Writer, one Write per frame, in Offer
// order.
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

	wake   chan struct{} // capacity 1; signalled when the queue becomes non-empty and on Close
	exited chan struct{} // closed when the writer returns

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
		w:      w,
		ring:   make([]queued, limit),
		wake:   make(chan struct{}, 1),
		exited: make(chan struct{}),
	}
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Start starts the writer goroutine. Calling it again, or after Close, does
// nothing.
func (o *Outbox) Start() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.started || o.stopped {
		return
	}
	o.started = true
	go o.run()
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
	wake := o.n == 1
	o.mu.Unlock()
	if wake {
		// The writer only sleeps after finding n == 0, so only the Offer
		// that makes the queue non-empty needs to wake it.
		o.signal()
	}
	return true
}

// signal wakes the writer if it sleeps, or makes its next sleep return at
// once. It never blocks: a pending token is enough.
func (o *Outbox) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Close stops the Outbox: later Offers return false, queued frames are
// discarded, the abort function (see [WithAbort]) is called, and Close waits
// for the writer goroutine to return, which includes any Write in progress.
// It is idempotent and safe to call concurrently and on an Outbox never
// started.
func (o *Outbox) Close() {
	o.closeOnce.Do(func() {
		o.mu.Lock()
		o.stopLocked()
		o.mu.Unlock()
		o.signal()
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

// Done returns a channel that is closed when the writer goroutine has
// returned, after a Write error (see [Outbox.Err]) or Close. The owner can
// select on it to notice a failed stream and remove the member. It is never
// closed if Start was not called.
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
	// Written counts frames written (gap notices excluded).
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

// run is the writer goroutine. It takes the lock twice per batch of up to
// maxWriteBatch frames: to copy the batch out and to free its slots (and
// look for more).
func (o *Outbox) run() {
	defer close(o.exited)
	batch := make([]queued, min(len(o.ring), maxWriteBatch))
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
		if o.n == 0 {
			// Drops after everything queued has been written: tell now
			// rather than wait for the next frame, which may never come.
			dropped := o.pendingGap
			o.pendingGap = 0
			o.mu.Unlock()
			if !o.writeGap(dropped) {
				return
			}
			o.mu.Lock()
			continue
		}
		// Copy a contiguous run of slots. They stay occupied (counted in n
		// and bytes) until written, so the queue's frames never exceed the
		// limits.
		k := copy(batch, o.ring[o.head:min(o.head+o.n, len(o.ring))])
		o.mu.Unlock()

		written := 0
		for i := range batch[:k] {
			q := batch[i]
			batch[i] = queued{}
			written += len(q.frame)
			if q.gap > 0 && !o.writeGap(q.gap) {
				return
			}
			if _, err := o.w.Write(q.frame); err != nil {
				o.fail(err)
				return
			}
			o.written.Add(1)
		}

		o.mu.Lock()
		if o.stopped {
			o.mu.Unlock()
			return
		}
		clear(o.ring[o.head : o.head+k])
		o.head += k
		if o.head == len(o.ring) {
			o.head = 0
		}
		o.n -= k
		o.bytes -= written
	}
}

// writeGap writes the gap notice for dropped frames; it reports false if
// the writer must stop.
func (o *Outbox) writeGap(dropped uint64) bool {
	if o.gap == nil {
		return true
	}
	f := o.gap(dropped)
	if len(f) == 0 {
		return true
	}
	if _, err := o.w.Write(f); err != nil {
		o.fail(err)
		return false
	}
	o.gaps.Add(1)
	return true
}

// fail records the writer's error and stops the Outbox.
func (o *Outbox) fail(err error) {
	o.mu.Lock()
	if !o.stopped {
		o.err = fmt.Errorf("fanout: outbox write: %w", err)
		o.stopLocked()
	}
	o.mu.Unlock()
}
