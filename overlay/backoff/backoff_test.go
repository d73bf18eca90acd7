package backoff

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

const seed = 20101222 // the day Skype's supernodes fell over

func newRand(tb testing.TB, stream uint64) *rand.Rand {
	tb.Helper()
	return rand.New(rand.NewPCG(seed, stream))
}

func mustNew(tb testing.TB, p Policy, rng *rand.Rand) *Backoff {
	tb.Helper()
	b, err := New(p, rng)
	if err != nil {
		tb.Fatalf("New(%+v): %v", p, err)
	}
	return b
}

func TestPolicyValidate(t *testing.T) {
	tests := []struct {
		name  string
		p     Policy
		field string // empty: valid
	}{
		{name: "default", p: DefaultPolicy()},
		{name: "base equals max", p: Policy{Base: time.Second, Max: time.Second}},
		{name: "zero", p: Policy{}, field: "Base"},
		{name: "negative base", p: Policy{Base: -1, Max: time.Second}, field: "Base"},
		{name: "max below base", p: Policy{Base: time.Second, Max: time.Millisecond}, field: "Max"},
		{name: "negative max retry-after", p: Policy{Base: time.Second, Max: time.Minute, MaxRetryAfter: -1}, field: "MaxRetryAfter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			_, newErr := New(tt.p, newRand(t, 0))
			if tt.field == "" {
				if err != nil || newErr != nil {
					t.Fatalf("Validate = %v, New = %v; want nil", err, newErr)
				}
				return
			}
			if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), tt.field+" must") {
				t.Fatalf("Validate = %v, want ErrInvalidPolicy naming %s", err, tt.field)
			}
			if !errors.Is(newErr, ErrInvalidPolicy) {
				t.Fatalf("New = %v, want ErrInvalidPolicy", newErr)
			}
		})
	}
	if _, err := New(DefaultPolicy(), nil); err == nil {
		t.Fatal("New with nil rng succeeded")
	}
}

// TestBounds checks every delay against the documented interval.
func TestBounds(t *testing.T) {
	p := Policy{Base: 100 * time.Millisecond, Max: 10 * time.Second, MaxRetryAfter: 30 * time.Second}
	hints := []time.Duration{-time.Second, 0, time.Millisecond, 500 * time.Millisecond, 5 * time.Second, 20 * time.Second, time.Hour}
	b := mustNew(t, p, newRand(t, 1))
	for run := range 200 {
		b.Reset()
		for attempt := range 40 {
			hint := hints[(run+attempt)%len(hints)]
			r := min(max(hint, 0), p.MaxRetryAfter)
			ceil := p.ceiling(attempt)
			d := b.Next(hint)
			if d < 0 {
				t.Fatalf("attempt %d hint %v: negative delay %v", attempt, hint, d)
			}
			if d < r {
				t.Fatalf("attempt %d hint %v: delay %v shorter than retry-after %v", attempt, hint, d, r)
			}
			if hi := r + max(ceil, r); d >= hi {
				t.Fatalf("attempt %d hint %v: delay %v >= bound %v", attempt, hint, d, hi)
			}
			if d >= p.MaxRetryAfter+max(p.Max, p.MaxRetryAfter) {
				t.Fatalf("delay %v exceeds the policy's absolute bound", d)
			}
			if b.Attempt() != attempt+1 {
				t.Fatalf("Attempt = %d, want %d", b.Attempt(), attempt+1)
			}
		}
	}
}

func TestCeiling(t *testing.T) {
	p := Policy{Base: 3 * time.Millisecond, Max: time.Second}
	want := []time.Duration{3, 6, 12, 24, 48, 96, 192, 384, 768}
	for i, w := range want {
		if got := p.ceiling(i); got != w*time.Millisecond {
			t.Fatalf("ceiling(%d) = %v, want %v", i, got, w*time.Millisecond)
		}
	}
	for _, n := range []int{9, 10, 62, 63, 64, 1000, 1<<62 + 1} {
		if got := p.ceiling(n); got != time.Second {
			t.Fatalf("ceiling(%d) = %v, want Max", n, got)
		}
	}
	huge := Policy{Base: 1, Max: 1<<63 - 1}
	if got := huge.ceiling(62); got != 1<<62 {
		t.Fatalf("ceiling(62) = %v, want 2^62ns", got)
	}
	if got := huge.ceiling(63); got != huge.Max {
		t.Fatalf("ceiling(63) = %v, want Max", got)
	}
}

// TestGrowsWithAttempts checks the mean delay doubles per attempt until the
// cap, as full jitter promises (mean = ceiling/2).
func TestGrowsWithAttempts(t *testing.T) {
	p := Policy{Base: 100 * time.Millisecond, Max: 6400 * time.Millisecond}
	const samples = 4000
	rng := newRand(t, 2)
	b := mustNew(t, p, rng)
	var prev float64
	for attempt := range 10 {
		var sum float64
		for range samples {
			b.Reset()
			for range attempt {
				b.Next(0)
			}
			sum += float64(b.Next(0))
		}
		mean := sum / samples
		want := float64(p.ceiling(attempt)) / 2
		if mean < 0.9*want || mean > 1.1*want {
			t.Errorf("attempt %d: mean delay %v, want about %v", attempt, time.Duration(mean), time.Duration(want))
		}
		if attempt > 0 && attempt <= 6 && mean <= prev {
			t.Errorf("attempt %d: mean %v did not grow from %v", attempt, time.Duration(mean), time.Duration(prev))
		}
		prev = mean
	}
}

func TestReset(t *testing.T) {
	p := Policy{Base: time.Millisecond, Max: time.Hour}
	b := mustNew(t, p, newRand(t, 3))
	for range 20 {
		b.Next(0)
	}
	if b.Attempt() != 20 {
		t.Fatalf("Attempt = %d, want 20", b.Attempt())
	}
	b.Reset()
	if b.Attempt() != 0 {
		t.Fatalf("Attempt after Reset = %d, want 0", b.Attempt())
	}
	if d := b.Next(0); d >= p.Base {
		t.Fatalf("first delay after Reset = %v, want < Base %v", d, p.Base)
	}
	if got := b.Policy(); got != p {
		t.Fatalf("Policy() = %+v, want %+v", got, p)
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	p := Policy{Base: 10 * time.Millisecond, Max: 100 * time.Millisecond, MaxRetryAfter: time.Minute}
	b := mustNew(t, p, newRand(t, 4))
	for range 1000 {
		b.Reset()
		d := b.Next(2 * time.Second)
		// The window is max(c_0, r) = r: delay in [2s, 4s).
		if d < 2*time.Second || d >= 4*time.Second {
			t.Fatalf("delay %v for hint 2s, want in [2s, 4s)", d)
		}
	}
	// Hints above MaxRetryAfter are clamped.
	if d := b.Next(24 * time.Hour); d < time.Minute || d >= 2*time.Minute {
		t.Fatalf("delay %v for hint 24h, want in [1m, 2m)", d)
	}
	// MaxRetryAfter 0 ignores hints.
	p.MaxRetryAfter = 0
	b = mustNew(t, p, newRand(t, 5))
	if d := b.Next(time.Hour); d >= p.Base {
		t.Fatalf("delay %v with hints ignored, want < Base", d)
	}
}

func TestSaturates(t *testing.T) {
	p := Policy{Base: 1, Max: 1<<63 - 1, MaxRetryAfter: 1<<63 - 1}
	b := mustNew(t, p, newRand(t, 6))
	for range 100 {
		if d := b.Next(1<<63 - 1); d < 0 {
			t.Fatalf("delay overflowed to %v", d)
		}
	}
}

func TestFixed(t *testing.T) {
	var s Strategy = Fixed(time.Second)
	for _, tt := range []struct{ hint, want time.Duration }{
		{0, time.Second}, {-time.Second, time.Second}, {500 * time.Millisecond, time.Second}, {3 * time.Second, 3 * time.Second},
	} {
		if got := s.Next(tt.hint); got != tt.want {
			t.Errorf("Fixed(1s).Next(%v) = %v, want %v", tt.hint, got, tt.want)
		}
	}
	s.Reset()
	if got := Fixed(-time.Second).Next(0); got != 0 {
		t.Errorf("Fixed(-1s).Next(0) = %v, want 0", got)
	}
}

func TestStagger(t *testing.T) {
	rng := newRand(t, 7)
	if got := Stagger(0, rng); got != 0 {
		t.Fatalf("Stagger(0) = %v", got)
	}
	if got := Stagger(-time.Second, rng); got != 0 {
		t.Fatalf("Stagger(-1s) = %v", got)
	}
	const window = 10 * time.Second
	arrivals := make([]time.Duration, 1000)
	for i := range arrivals {
		d := Stagger(window, rng)
		if d < 0 || d >= window {
			t.Fatalf("Stagger(%v) = %v, out of range", window, d)
		}
		arrivals[i] = d
	}
	h := bucket(arrivals)
	if peak, mean := h.peak(), h.mean(); float64(peak) > 3*mean {
		t.Fatalf("Stagger peak %d per window, %.1f× the mean %.1f", peak, float64(peak)/mean, mean)
	}
}
