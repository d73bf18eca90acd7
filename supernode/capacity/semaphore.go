package capacity

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// maxNameLen bounds a semaphore name. Names are label values and may be sent
// to peers as the Resource of a BUSY refusal, so they stay short.
const maxNameLen = 64

// MaxSlots is the largest maximum a [Semaphore] accepts, 2^31-1. The count of
// held slots shares one 64-bit word with the acquisition counter and gets 32
// bits, the top half of whose range marks a bad release being undone; the
// limit is far above any real one.
const MaxSlots = math.MaxInt32

// pad separates groups of fields that are written by different parties, so
// that a write to one group does not invalidate the cache line holding the
// other. 128 bytes covers the adjacent-line prefetcher of x86 as well as
// 128-byte lines on some arm64 cores.
type pad [128]byte

const (
	slotMask = 1<<32 - 1 // low half of state: slots held
	acqOne   = 1 << 32   // one acquisition in the high half of state
)

// Semaphore is a fail-fast capacity counter. The zero value is not usable;
// create one with [New]. All methods are safe for concurrent use.
type Semaphore struct {
	// An atomic read-modify-write costs far more than anything else on the
	// fast path, so a successful acquire does exactly one (a CAS) and a
	// release exactly one (an add), counting included: the low 32 bits of
	// state hold the slots in use and the high 32 bits count acquisitions
	// modulo 2^32, so the CAS that takes a slot also counts it. The
	// acquirer whose CAS wraps the high half to zero adds one to wraps, so
	// the 64-bit total is wraps<<32 + high half (see acquired). A separate
	// acquisition counter would add a third atomic per acquire/release
	// pair, about 40% more time (see BenchmarkTryAcquireRelease).

	_ pad
	// Hot line: read by every TryAcquire, written by every successful
	// TryAcquire and Release. max is read-mostly and sits here so that an
	// acquire reads a single line.
	state atomic.Uint64
	max   atomic.Int64
	_     pad
	// Written only on refusal, kept apart so that a refusal storm does not
	// steal the hot line from callers that succeed.
	refused atomic.Uint64
	_       pad
	// Cold fields.
	wraps        atomic.Uint64 // times the acquisition half of state wrapped
	acquiredSeen atomic.Uint64 // largest acquisition total reported; keeps it monotonic
	unheld       atomic.Uint64
	busy         atomic.Pointer[BusyError]
	name         string
	descs        descs
}

// Option configures a [Semaphore] in [New] or a [Set] in [NewSet].
type Option func(*config) error

type config struct {
	retryAfter time.Duration
}

// WithRetryAfter sets the retry-after hint carried by the semaphore's
// [*BusyError]. d must not be negative; zero (the default) means no hint.
//
// The hint is a fixed value per semaphore rather than a function evaluated on
// each refusal: a per-refusal value would need either an allocation or a
// shared mutable error. Use [Semaphore.SetRetryAfter] to change it at
// runtime. Spreading retries is the client's job (package overlay/backoff).
func WithRetryAfter(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("capacity: WithRetryAfter: negative duration %v", d)
		}
		c.retryAfter = d
		return nil
	}
}

// New returns a semaphore with max slots, none held.
//
// name identifies the guarded resource in metrics and BUSY errors; it must be
// 1 to 64 characters from [a-z0-9_]. max must be in [1, [MaxSlots]] (use
// [Semaphore.SetMax] with 0 to drain a running semaphore). New does no I/O
// and registers nothing; see [Register].
func New(name string, max int, opts ...Option) (*Semaphore, error) {
	if err := validateName(name); err != nil {
		return nil, err
	}
	if max < 1 || max > MaxSlots {
		return nil, fmt.Errorf("capacity: new semaphore %q: max must be in [1, %d], got %d", name, MaxSlots, max)
	}
	var c config
	for _, o := range opts {
		if err := o(&c); err != nil {
			return nil, fmt.Errorf("capacity: new semaphore %q: %w", name, err)
		}
	}
	s := &Semaphore{name: name, descs: newDescs(name)}
	s.max.Store(int64(max))
	s.busy.Store(&BusyError{Resource: name, RetryAfter: c.retryAfter})
	return s, nil
}

func validateName(name string) error {
	if name == "" {
		return fmt.Errorf("capacity: new semaphore: name must not be empty")
	}
	if len(name) > maxNameLen {
		return fmt.Errorf("capacity: new semaphore: name %q longer than %d bytes", name, maxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return fmt.Errorf("capacity: new semaphore: name %q: character %q not in [a-z0-9_]", name, c)
		}
	}
	return nil
}

// Name returns the semaphore's name, as given to [New].
func (s *Semaphore) Name() string { return s.name }

// TryAcquire takes a slot if one is free and reports whether it did. It never
// blocks. A caller that gets true must call [Semaphore.Release] exactly once.
// A refusal is counted; return [Semaphore.Busy] to the peer.
func (s *Semaphore) TryAcquire() bool {
	for {
		cur := s.state.Load()
		// While a bad Release is being undone the slot half reads as a
		// huge number (see Release), so acquirers are refused, never
		// over-admitted.
		if int64(cur&slotMask) >= s.max.Load() {
			s.refused.Add(1)
			return false
		}
		// Slots held stay <= MaxSlots < 2^32-1, so +1 never carries into
		// the acquisition half; the acquisition half wraps modulo 2^32.
		next := cur + acqOne + 1
		if s.state.CompareAndSwap(cur, next) {
			if next>>32 == 0 {
				s.wraps.Add(1)
			}
			return true
		}
	}
}

// Release returns a slot taken by [Semaphore.TryAcquire]. If no slot is held
// it changes nothing, counts the event and returns [ErrNotHeld]; callers that
// defer Release may ignore the error because the metric records it.
//
// Release cannot detect a release by the wrong owner while other slots are
// held: slots are anonymous, as in any counting semaphore. Such a release
// lowers the count below the number of real holders until the owner's own
// release comes back as ErrNotHeld.
func (s *Semaphore) Release() error {
	// One atomic add on the fast path. If no slot was held the slot half
	// borrows from the acquisition half and reads as 2^32-1 (or just below,
	// with several bad releases at once) until the add is undone; any value
	// above MaxSlots means "being undone". TryAcquire refuses in that
	// window and readers normalise it away (see load), so the bound holds
	// and the counter is never seen below zero.
	if uint32(s.state.Add(^uint64(0))) > MaxSlots {
		s.state.Add(1)
		s.unheld.Add(1)
		return ErrNotHeld
	}
	return nil
}

// load returns the slots held and the acquisition half of state, with the
// transient borrow of a bad Release in progress undone.
func (s *Semaphore) load() (inUse, acqLow uint64) {
	cur := s.state.Load()
	if low := cur & slotMask; low > MaxSlots {
		cur += acqOne - low // add back the pending undos: low half 0, borrow repaid
	}
	return cur & slotMask, cur >> 32
}

// acquired returns the number of successful acquisitions since creation. It
// never decreases between calls: in the instant after the acquisition half
// wraps and before wraps is incremented the computed total is 2^32 short,
// and the last value reported is returned instead.
func (s *Semaphore) acquired() uint64 {
	w := s.wraps.Load() // before state: a wrap in between makes the sum low, never high
	_, low := s.load()
	total := w<<32 + low
	for {
		seen := s.acquiredSeen.Load()
		if total <= seen {
			return seen
		}
		if s.acquiredSeen.CompareAndSwap(seen, total) {
			return total
		}
	}
}

// Do runs fn while holding a slot and returns fn's error. If no slot is free
// it returns the semaphore's [*BusyError] at once, without calling fn and
// without allocating. The slot is released when fn returns or panics.
func (s *Semaphore) Do(fn func() error) error {
	if !s.TryAcquire() {
		return s.busy.Load()
	}
	defer s.Release() //nolint:errcheck // cannot fail: the slot is held
	return fn()
}

// Busy returns the semaphore's BUSY refusal. It is preallocated and shared:
// do not modify it. It is never nil.
func (s *Semaphore) Busy() *BusyError { return s.busy.Load() }

// SetRetryAfter changes the retry-after hint of future refusals. d must not be
// negative. It allocates a new [*BusyError] (errors already returned keep the
// old hint), so it belongs on a control path, not per request.
func (s *Semaphore) SetRetryAfter(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("capacity: semaphore %q: set retry-after: negative duration %v", s.name, d)
	}
	s.busy.Store(&BusyError{Resource: s.name, RetryAfter: d})
	return nil
}

// InUse returns the number of slots held at the moment of the call.
func (s *Semaphore) InUse() int {
	n, _ := s.load()
	return int(n)
}

// Max returns the current maximum number of slots.
func (s *Semaphore) Max() int { return int(s.max.Load()) }

// SetMax changes the maximum at runtime, for example on promotion to
// mega-supernode. n must be in [0, [MaxSlots]]. Raising it admits new callers at once.
// Lowering it below [Semaphore.InUse] evicts nobody: acquisitions are refused
// until enough slots have been released to go under n. n == 0 drains the
// semaphore: every acquisition is refused.
func (s *Semaphore) SetMax(n int) error {
	if n < 0 || n > MaxSlots {
		return fmt.Errorf("capacity: semaphore %q: set max: must be in [0, %d], got %d", s.name, MaxSlots, n)
	}
	s.max.Store(int64(n))
	return nil
}

// Stats is a snapshot of a semaphore's counters, for status output. The
// fields are read one by one, not atomically together.
type Stats struct {
	// Name is the semaphore's name.
	Name string `json:"name"`
	// InUse is the number of slots held.
	InUse int `json:"in_use"`
	// Max is the current maximum.
	Max int `json:"max"`
	// Acquired counts successful acquisitions since creation.
	Acquired uint64 `json:"acquired"`
	// Refused counts refused acquisitions since creation.
	Refused uint64 `json:"refused"`
	// UnheldReleases counts releases that returned [ErrNotHeld].
	UnheldReleases uint64 `json:"unheld_releases"`
	// RetryAfter is the current retry-after hint.
	RetryAfter time.Duration `json:"retry_after"`
}

// Stats returns a snapshot of the semaphore's counters.
func (s *Semaphore) Stats() Stats {
	return Stats{
		Name:           s.name,
		InUse:          s.InUse(),
		Max:            int(s.max.Load()),
		Acquired:       s.acquired(),
		Refused:        s.refused.Load(),
		UnheldReleases: s.unheld.Load(),
		RetryAfter:     s.busy.Load().RetryAfter,
	}
}

var _ prometheus.Collector = (*Semaphore)(nil)
