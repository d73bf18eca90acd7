package capacity

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func mustNew(tb testing.TB, name string, max int, opts ...Option) *Semaphore {
	tb.Helper()
	s, err := New(name, max, opts...)
	if err != nil {
		tb.Fatalf("New(%q, %d): %v", name, max, err)
	}
	return s
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name    string
		semName string
		max     int
		opts    []Option
		wantErr string // substring; empty means success
	}{
		{name: "ok", semName: "relays", max: 1},
		{name: "ok with retry-after", semName: "a_1", max: 10, opts: []Option{WithRetryAfter(time.Second)}},
		{name: "empty name", semName: "", max: 1, wantErr: "name must not be empty"},
		{name: "upper case name", semName: "Relays", max: 1, wantErr: "not in [a-z0-9_]"},
		{name: "peer-id-like name", semName: "12D3Koo/x", max: 1, wantErr: "not in [a-z0-9_]"},
		{name: "long name", semName: strings.Repeat("a", maxNameLen+1), max: 1, wantErr: "longer than"},
		{name: "zero max", semName: "relays", max: 0, wantErr: "max must be in"},
		{name: "negative max", semName: "relays", max: -3, wantErr: "max must be in"},
		{name: "max too large", semName: "relays", max: MaxSlots + 1, wantErr: "max must be in"},
		{name: "max at limit", semName: "relays", max: MaxSlots},
		{name: "negative retry-after", semName: "relays", max: 1, opts: []Option{WithRetryAfter(-time.Second)}, wantErr: "WithRetryAfter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.semName, tt.max, tt.opts...)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New: unexpected error %v", err)
				}
				if s.Name() != tt.semName || s.Max() != tt.max || s.InUse() != 0 {
					t.Fatalf("New: got name=%q max=%d inUse=%d", s.Name(), s.Max(), s.InUse())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New: error %v, want one containing %q", err, tt.wantErr)
			}
			if s != nil {
				t.Fatalf("New: non-nil semaphore with error")
			}
		})
	}
}

func TestTryAcquireRelease(t *testing.T) {
	s := mustNew(t, "relays", 2)
	if first, second := s.TryAcquire(), s.TryAcquire(); !first || !second {
		t.Fatal("could not take 2 of 2 slots")
	}
	if s.TryAcquire() {
		t.Fatal("took a third slot of 2")
	}
	if got := s.InUse(); got != 2 {
		t.Fatalf("InUse = %d, want 2", got)
	}
	for i := 0; i < 2; i++ {
		if err := s.Release(); err != nil {
			t.Fatalf("Release %d: %v", i, err)
		}
	}
	st := s.Stats()
	if st.InUse != 0 || st.Acquired != 2 || st.Refused != 1 || st.UnheldReleases != 0 {
		t.Fatalf("Stats = %+v, want in_use 0, acquired 2, refused 1, unheld 0", st)
	}
}

// TestNeverExceedsMax hammers one semaphore from many goroutines and tracks a
// high-water mark of the slots actually held.
func TestNeverExceedsMax(t *testing.T) {
	const (
		max        = 8
		goroutines = 64
		attempts   = 2000
	)
	s := mustNew(t, "relays", max)
	var held, highWater atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range goroutines {
		wg.Go(func() {
			<-start
			for range attempts {
				if !s.TryAcquire() {
					continue
				}
				// held counts only between a successful acquire and the
				// matching release, so it is a lower bound on slots held.
				h := held.Add(1)
				for {
					hw := highWater.Load()
					if h <= hw || highWater.CompareAndSwap(hw, h) {
						break
					}
				}
				// Hold the slot across a reschedule so that other
				// goroutines run while it is held and the semaphore
				// actually fills up.
				runtime.Gosched()
				held.Add(-1)
				if err := s.Release(); err != nil {
					t.Errorf("Release: %v", err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()

	hw := highWater.Load()
	t.Logf("high-water mark %d of max %d", hw, max)
	if hw > max {
		t.Fatalf("high-water mark %d exceeds max %d", hw, max)
	}
	if hw < max {
		t.Fatalf("high-water mark %d never reached max %d: the test did not fill the semaphore", hw, max)
	}
	st := s.Stats()
	if st.InUse != 0 {
		t.Fatalf("InUse = %d after all releases, want 0", st.InUse)
	}
	if got := st.Acquired + st.Refused; got != goroutines*attempts {
		t.Fatalf("acquired %d + refused %d = %d, want %d attempts", st.Acquired, st.Refused, got, goroutines*attempts)
	}
	if st.UnheldReleases != 0 {
		t.Fatalf("UnheldReleases = %d, want 0", st.UnheldReleases)
	}
}

func TestReleaseUnheld(t *testing.T) {
	s := mustNew(t, "lookups", 1)
	if err := s.Release(); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Release on empty semaphore = %v, want ErrNotHeld", err)
	}
	if got := s.InUse(); got != 0 {
		t.Fatalf("InUse = %d after unheld release, want 0", got)
	}
	// The counter did not go negative: exactly one slot is still available.
	if !s.TryAcquire() {
		t.Fatal("TryAcquire failed after unheld release")
	}
	if s.TryAcquire() {
		t.Fatal("unheld release created an extra slot")
	}
	if err := s.Release(); err != nil {
		t.Fatalf("Release of held slot: %v", err)
	}
	// Double release.
	if err := s.Release(); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("double Release = %v, want ErrNotHeld", err)
	}
	if got := s.Stats().UnheldReleases; got != 2 {
		t.Fatalf("UnheldReleases = %d, want 2", got)
	}
}

// TestReleaseUnheldConcurrent runs a buggy releaser against correct users.
// Slots are anonymous, so a release by the wrong goroutine while slots are
// held cannot be detected; what must hold is that the counter itself never
// leaves [0, max] and that releases finding it empty are caught.
func TestReleaseUnheldConcurrent(t *testing.T) {
	const max = 4
	s := mustNew(t, "lookups", max)
	var wg sync.WaitGroup
	check := func() bool {
		if n := s.InUse(); n < 0 || n > max {
			t.Errorf("InUse = %d, outside [0, %d]", n, max)
			return false
		}
		return true
	}
	for range 8 {
		wg.Go(func() {
			for range 2000 {
				if !s.TryAcquire() {
					continue
				}
				runtime.Gosched()
				if !check() {
					return
				}
				_ = s.Release() // may fail if the buggy goroutine stole the slot
			}
		})
	}
	wg.Go(func() {
		for range 2000 {
			runtime.Gosched()
			_ = s.Release()
			if !check() {
				return
			}
		}
	})
	wg.Wait()
	if n := s.InUse(); n != 0 {
		t.Fatalf("InUse = %d at end, want 0", n)
	}
	if s.Stats().UnheldReleases == 0 {
		t.Fatal("no unheld release recorded")
	}
}

func TestBusyError(t *testing.T) {
	s := mustNew(t, "attached_peers", 1, WithRetryAfter(3*time.Second))
	if !s.TryAcquire() {
		t.Fatal("TryAcquire on empty semaphore failed")
	}
	called := false
	err := s.Do(func() error { called = true; return nil })
	if called {
		t.Fatal("Do ran fn without a slot")
	}
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("Do = %v, want errors.Is ErrBusy", err)
	}
	var be *BusyError
	if !errors.As(err, &be) {
		t.Fatalf("Do = %v, want errors.As *BusyError", err)
	}
	if be.Resource != "attached_peers" || be.RetryAfter != 3*time.Second {
		t.Fatalf("BusyError = %+v, want resource attached_peers, retry-after 3s", *be)
	}
	if be != s.Busy() {
		t.Fatal("Do returned a BusyError other than the preallocated one")
	}
	const wantMsg = "busy: attached_peers at capacity, retry after 3s"
	if got := err.Error(); got != wantMsg {
		t.Fatalf("Error() = %q, want %q", got, wantMsg)
	}
	wrapped := fmt.Errorf("attach 12D3KooW...: %w", err)
	if !errors.Is(wrapped, ErrBusy) || !errors.As(wrapped, &be) {
		t.Fatalf("wrapped BUSY error %v does not match", wrapped)
	}
	if errors.Is(ErrNotHeld, ErrBusy) {
		t.Fatal("ErrNotHeld matches ErrBusy")
	}
	if got := (&BusyError{Resource: "relays"}).Error(); got != "busy: relays at capacity" {
		t.Fatalf("Error() without hint = %q", got)
	}
}

func TestSetRetryAfter(t *testing.T) {
	s := mustNew(t, "relays", 1)
	old := s.Busy()
	if old.RetryAfter != 0 {
		t.Fatalf("default retry-after = %v, want 0", old.RetryAfter)
	}
	if err := s.SetRetryAfter(-1); err == nil {
		t.Fatal("SetRetryAfter(-1) succeeded")
	}
	if err := s.SetRetryAfter(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if got := s.Busy().RetryAfter; got != 5*time.Second {
		t.Fatalf("retry-after = %v, want 5s", got)
	}
	if old.RetryAfter != 0 {
		t.Fatal("SetRetryAfter modified an error already handed out")
	}
	if got := s.Stats().RetryAfter; got != 5*time.Second {
		t.Fatalf("Stats().RetryAfter = %v, want 5s", got)
	}
}

func TestDoReleases(t *testing.T) {
	errBoom := errors.New("boom")
	tests := []struct {
		name      string
		fn        func() error
		wantErr   error
		wantPanic bool
	}{
		{name: "nil", fn: func() error { return nil }},
		{name: "error", fn: func() error { return errBoom }, wantErr: errBoom},
		{name: "panic", fn: func() error { panic(errBoom) }, wantPanic: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustNew(t, "fanout_jobs", 1)
			var inside int
			fn := func() error {
				inside = s.InUse()
				return tt.fn()
			}
			var err error
			panicked := func() (p bool) {
				defer func() { p = recover() != nil }()
				err = s.Do(fn)
				return false
			}()
			if panicked != tt.wantPanic {
				t.Fatalf("panicked = %v, want %v", panicked, tt.wantPanic)
			}
			if !tt.wantPanic && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Do = %v, want %v", err, tt.wantErr)
			}
			if inside != 1 {
				t.Fatalf("InUse inside fn = %d, want 1", inside)
			}
			if got := s.InUse(); got != 0 {
				t.Fatalf("InUse after Do = %d, want 0", got)
			}
			if s.Stats().UnheldReleases != 0 {
				t.Fatal("Do released a slot it did not hold")
			}
		})
	}
}

func TestSetMax(t *testing.T) {
	s := mustNew(t, "attached_peers", 4)
	for i := range 4 {
		if !s.TryAcquire() {
			t.Fatalf("acquire %d of 4 failed", i)
		}
	}

	// Lowering below in-use evicts nobody and refuses new acquires.
	if err := s.SetMax(2); err != nil {
		t.Fatal(err)
	}
	if s.InUse() != 4 || s.Max() != 2 {
		t.Fatalf("after SetMax(2): in use %d max %d, want 4 and 2", s.InUse(), s.Max())
	}
	for held := 4; held > 2; held-- {
		if s.TryAcquire() {
			t.Fatalf("acquired with %d held over max 2", held)
		}
		if err := s.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if s.TryAcquire() {
		t.Fatal("acquired at 2 of 2")
	}
	if err := s.Release(); err != nil { // 1 held
		t.Fatal(err)
	}
	if !s.TryAcquire() { // 2 held
		t.Fatal("refused at 1 of 2")
	}

	// Raising admits at once (promotion).
	if err := s.SetMax(10); err != nil {
		t.Fatal(err)
	}
	for i := 2; i < 10; i++ {
		if !s.TryAcquire() {
			t.Fatalf("refused at %d of 10", i)
		}
	}
	if s.TryAcquire() {
		t.Fatal("acquired 11 of 10")
	}

	// Zero drains.
	if err := s.SetMax(0); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := s.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if s.TryAcquire() {
		t.Fatal("acquired with max 0")
	}

	if err := s.SetMax(-1); err == nil {
		t.Fatal("SetMax(-1) succeeded")
	}
	if err := s.SetMax(MaxSlots + 1); err == nil {
		t.Fatal("SetMax(MaxSlots+1) succeeded")
	}
	if s.Max() != 0 {
		t.Fatalf("failed SetMax changed max to %d", s.Max())
	}
}

// TestSetMaxConcurrent lowers and raises the maximum while goroutines
// acquire; when the maximum is stable again the bound holds.
func TestSetMaxConcurrent(t *testing.T) {
	s := mustNew(t, "relays", 16)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if s.TryAcquire() {
					_ = s.Release()
				}
			}
		})
	}
	for i := range 1000 {
		_ = s.SetMax(1 + i%16)
	}
	close(stop)
	wg.Wait()
	if s.InUse() != 0 || s.Stats().UnheldReleases != 0 {
		t.Fatalf("after churn: %+v", s.Stats())
	}
}

func TestZeroAllocs(t *testing.T) {
	s := mustNew(t, "relays", 1, WithRetryAfter(time.Second))
	ok := func() error { return nil }

	if n := testing.AllocsPerRun(1000, func() {
		if s.TryAcquire() {
			_ = s.Release()
		}
	}); n != 0 {
		t.Errorf("TryAcquire+Release: %v allocs, want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() { _ = s.Do(ok) }); n != 0 {
		t.Errorf("Do (slot free): %v allocs, want 0", n)
	}
	if !s.TryAcquire() {
		t.Fatal("TryAcquire failed")
	}
	var err error
	if n := testing.AllocsPerRun(1000, func() { err = s.Do(ok) }); n != 0 {
		t.Errorf("Do (BUSY): %v allocs, want 0", n)
	}
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("Do on full semaphore = %v, want BUSY", err)
	}
	if n := testing.AllocsPerRun(1000, func() { _ = s.TryAcquire() }); n != 0 {
		t.Errorf("TryAcquire (refused): %v allocs, want 0", n)
	}
	_ = s.Release()
	if n := testing.AllocsPerRun(1000, func() { _ = s.Release() }); n != 0 {
		t.Errorf("Release (not held): %v allocs, want 0", n)
	}
}

func TestAcquiredCounterWraps(t *testing.T) {
	s := mustNew(t, "relays", 3)
	s.setAcquiredForTest(0, 1<<32-2)
	if got := s.Stats().Acquired; got != 1<<32-2 {
		t.Fatalf("Acquired = %d, want 2^32-2", got)
	}
	s.TryAcquire() // 2^32-1
	s.TryAcquire() // wraps: 2^32
	s.TryAcquire() // 2^32+1
	st := s.Stats()
	if st.Acquired != 1<<32+1 || st.InUse != 3 {
		t.Fatalf("after wrap: acquired %d in use %d, want 2^32+1 and 3", st.Acquired, st.InUse)
	}
	for range 3 {
		if err := s.Release(); err != nil {
			t.Fatal(err)
		}
	}
	// A bad release right after a wrap borrows from the acquisition half
	// (0 -> 2^32-1) until undone; readers must not see 2^33-1.
	s2 := mustNew(t, "relays", 3)
	s2.setAcquiredForTest(1, 0)
	s2.beginBadReleaseForTest()
	if st := s2.Stats(); st.Acquired != 1<<32 || st.InUse != 0 {
		t.Fatalf("during bad release: %+v, want acquired 2^32, in use 0", st)
	}
	s2.endBadReleaseForTest()
	if err := s2.Release(); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Release = %v, want ErrNotHeld", err)
	}
	if st := s2.Stats(); st.Acquired != 1<<32 || st.InUse != 0 {
		t.Fatalf("after bad release: %+v, want acquired 2^32, in use 0", st)
	}

	// The total is monotonic even if read inside the instant between the
	// wrapping CAS and the wraps increment (simulated by wraps lagging).
	s.setAcquiredForTest(0, 5) // total reads as 5 < 2^32+1 already reported
	if got := s.Stats().Acquired; got != 1<<32+1 {
		t.Fatalf("Acquired went back to %d, want 2^32+1 kept", got)
	}
}

// TestBadReleaseWindow checks what other goroutines see while a bad release
// is being undone: no slot is admitted and nothing reads negative or huge.
func TestBadReleaseWindow(t *testing.T) {
	s := mustNew(t, "relays", 2)
	s.TryAcquire()
	s.TryAcquire()
	_ = s.Release()
	_ = s.Release()
	before := s.Stats()

	s.beginBadReleaseForTest()
	s.beginBadReleaseForTest() // two at once
	if s.TryAcquire() {
		t.Fatal("acquired during a bad release")
	}
	st := s.Stats()
	if st.InUse != 0 || st.Acquired != before.Acquired {
		t.Fatalf("during bad release: %+v, want in use 0 and acquired %d", st, before.Acquired)
	}
	s.endBadReleaseForTest()
	s.endBadReleaseForTest()
	if first, second, third := s.TryAcquire(), s.TryAcquire(), s.TryAcquire(); !first || !second || third {
		t.Fatal("bound wrong after bad release")
	}
}

// TestRefusedCountExact refuses from many goroutines at the same time: the
// refusal counter, written only on the refused path, must count every one.
func TestRefusedCountExact(t *testing.T) {
	const (
		goroutines = 32
		refusals   = 5000
	)
	s := mustNew(t, "relays", 1)
	if !s.TryAcquire() {
		t.Fatal("could not fill the semaphore")
	}
	var ready, wg sync.WaitGroup
	ready.Add(goroutines)
	start := make(chan struct{})
	for range goroutines {
		wg.Go(func() {
			ready.Done()
			<-start
			for range refusals {
				if s.TryAcquire() {
					t.Error("acquired a full semaphore")
					return
				}
			}
		})
	}
	ready.Wait()
	close(start)
	wg.Wait()
	st := s.Stats()
	if want := uint64(goroutines * refusals); st.Refused != want {
		t.Fatalf("Refused = %d, want %d", st.Refused, want)
	}
	if st.Acquired != 1 || st.InUse != 1 {
		t.Fatalf("Stats = %+v, want acquired 1 and in use 1", st)
	}
}
