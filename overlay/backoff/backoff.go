package backoff

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Strategy decides how long a client waits before its next attempt.
type Strategy interface {
	// Next returns the delay before the next attempt, given the
	// retry-after hint of the refusal that ended the last one (0 if none),
	// and advances the strategy's attempt count.
	Next(retryAfter time.Duration) time.Duration
	// Reset returns the strategy to its first attempt; call it after a
	// success.
	Reset()
}

var (
	_ Strategy = (*Backoff)(nil)
	_ Strategy = Fixed(0)
)

// Policy parameterises a [Backoff]. The zero value is invalid; start from
// [DefaultPolicy].
type Policy struct {
	// Base is the ceiling of the first delay's jitter window; each attempt
	// doubles it up to Max. Must be > 0.
	Base time.Duration `json:"base"`
	// Max caps the exponential ceiling. Must be >= Base.
	Max time.Duration `json:"max"`
	// MaxRetryAfter caps the server's retry-after hint, so that a buggy or
	// hostile supernode cannot park a client for hours. Must be >= 0; 0
	// ignores hints.
	MaxRetryAfter time.Duration `json:"max_retry_after"`
}

// DefaultPolicy returns the policy clients use unless configured otherwise:
// Base 1s, Max 60s, MaxRetryAfter 10m. With these, a client that keeps
// failing without hints retries within 1s, 2s, 4s, ... and then at a mean of
// 30s; a network of a million clients that all lost their supernode offers
// at most about 1e6/60s = 17k attempts per second once the ceiling is
// reached, spread evenly.
func DefaultPolicy() Policy {
	return Policy{Base: time.Second, Max: time.Minute, MaxRetryAfter: 10 * time.Minute}
}

// Validate reports the first invalid field of p, naming it. The error wraps
// [ErrInvalidPolicy].
func (p Policy) Validate() error {
	switch {
	case p.Base <= 0:
		return fmt.Errorf("%w: Base must be > 0, got %v", ErrInvalidPolicy, p.Base)
	case p.Max < p.Base:
		return fmt.Errorf("%w: Max must be >= Base (%v), got %v", ErrInvalidPolicy, p.Base, p.Max)
	case p.MaxRetryAfter < 0:
		return fmt.Errorf("%w: MaxRetryAfter must be >= 0, got %v", ErrInvalidPolicy, p.MaxRetryAfter)
	}
	return nil
}

// ceiling returns min(Max, Base * 2^attempt) without overflowing.
func (p Policy) ceiling(attempt int) time.Duration {
	if attempt >= 63 || p.Base > p.Max>>attempt {
		return p.Max
	}
	return p.Base << attempt
}

// Backoff is one client's exponential backoff with full jitter; see the
// package documentation for the formula. Create it with [New]; it is not
// safe for concurrent use.
type Backoff struct {
	p       Policy
	rng     *rand.Rand
	attempt int
}

// New returns a Backoff at attempt 0. rng is the client's own random source
// (see the package documentation on seeding); it is used only by Next and
// must not be shared with another goroutine.
func New(p Policy, rng *rand.Rand) (*Backoff, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if rng == nil {
		return nil, errors.New("backoff: new: nil random source")
	}
	return &Backoff{p: p, rng: rng}, nil
}

// Next returns the delay before the next attempt and advances the attempt
// count. retryAfter is the hint from the refusal that ended the previous
// attempt (0 if none); negative values are treated as 0 and values above
// Policy.MaxRetryAfter as MaxRetryAfter. The result is in
// [r, r + max(c_n, r)) where r is the clamped hint and c_n the exponential
// ceiling of this attempt, saturating at the largest Duration.
func (b *Backoff) Next(retryAfter time.Duration) time.Duration {
	r := min(max(retryAfter, 0), b.p.MaxRetryAfter)
	w := max(b.p.ceiling(b.attempt), r)
	if b.attempt < math.MaxInt {
		b.attempt++
	}
	var j time.Duration
	if w > 0 {
		j = time.Duration(b.rng.Int64N(int64(w)))
	}
	if r > math.MaxInt64-j {
		return math.MaxInt64
	}
	return r + j
}

// Reset returns b to attempt 0. Call it once an attempt succeeds.
func (b *Backoff) Reset() { b.attempt = 0 }

// Attempt returns how many delays Next has returned since New or the last
// Reset.
func (b *Backoff) Attempt() int { return b.attempt }

// Policy returns the policy b was created with.
func (b *Backoff) Policy() Policy { return b.p }

// Fixed is the naive strategy: wait the fixed interval, or the retry-after
// hint if it is longer, with no jitter and no growth. It exists to be
// compared against [Backoff]: every client refused at the same instant
// retries at the same instant. A negative interval is treated as 0.
type Fixed time.Duration

// Next returns max(f, retryAfter, 0).
func (f Fixed) Next(retryAfter time.Duration) time.Duration {
	return max(time.Duration(f), retryAfter, 0)
}

// Reset does nothing: Fixed has no state.
func (Fixed) Reset() {}

// Stagger returns a delay drawn uniformly from [0, window), or 0 if window
// <= 0. Use it to spread a move that many clients make for the same reason,
// such as returning to the home cluster once it has recovered after a
// failover: N clients that each wait Stagger(window) arrive at about
// N/window per unit of time instead of all at once. Choose window from the
// rate the home supernodes can absorb (window >= N / rate). rng is the
// client's own source and must not be nil.
func Stagger(window time.Duration, rng *rand.Rand) time.Duration {
	if window <= 0 {
		return 0
	}
	return time.Duration(rng.Int64N(int64(window)))
}
