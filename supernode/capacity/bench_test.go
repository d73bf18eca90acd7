package capacity

import (
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"
)

// sem is the part of a semaphore the benchmarks exercise.
type sem interface {
	tryAcquire() bool
	release()
}

type capacitySem struct{ s *Semaphore }

func (c capacitySem) tryAcquire() bool { return c.s.TryAcquire() }
func (c capacitySem) release()         { _ = c.s.Release() }

// bareSem is the lower bound: a CAS acquire and an add release with no
// counting and no unheld-release check. Against it the benchmarks show what
// Semaphore's metrics and checks cost.
type bareSem struct {
	_     pad
	inUse atomic.Int64
	max   int64
	_     pad
}

func (b *bareSem) tryAcquire() bool {
	for {
		cur := b.inUse.Load()
		if cur >= b.max {
			return false
		}
		if b.inUse.CompareAndSwap(cur, cur+1) {
			return true
		}
	}
}
func (b *bareSem) release() { b.inUse.Add(-1) }

// xsyncSem is golang.org/x/sync/semaphore.Weighted, a mutex-guarded
// semaphore with a FIFO of blocked Acquire callers.
type xsyncSem struct{ w *semaphore.Weighted }

func (x xsyncSem) tryAcquire() bool { return x.w.TryAcquire(1) }
func (x xsyncSem) release()         { x.w.Release(1) }

var impls = []struct {
	name string
	new  func(tb testing.TB, max int) sem
}{
	{"impl=capacity", func(tb testing.TB, max int) sem { return capacitySem{mustNew(tb, "bench", max)} }},
	{"impl=bare", func(_ testing.TB, max int) sem { return &bareSem{max: int64(max)} }},
	{"impl=xsync", func(_ testing.TB, max int) sem { return xsyncSem{semaphore.NewWeighted(int64(max))} }},
}

// bigMax is never reached by the acquire/release benchmarks.
const bigMax = 1 << 30

func BenchmarkTryAcquireRelease(b *testing.B) {
	for _, impl := range impls {
		b.Run(impl.name, func(b *testing.B) {
			s := impl.new(b, bigMax)
			b.ReportAllocs()
			for b.Loop() {
				if s.tryAcquire() {
					s.release()
				}
			}
		})
	}
}

func BenchmarkTryAcquireReleaseParallel(b *testing.B) {
	for _, impl := range impls {
		b.Run(impl.name, func(b *testing.B) {
			s := impl.new(b, bigMax)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if s.tryAcquire() {
						s.release()
					}
				}
			})
		})
	}
}

// BenchmarkRefused is one caller refused by a full semaphore.
func BenchmarkRefused(b *testing.B) {
	for _, impl := range impls {
		b.Run(impl.name, func(b *testing.B) {
			s := impl.new(b, 1)
			if !s.tryAcquire() {
				b.Fatal("could not fill semaphore")
			}
			b.ReportAllocs()
			for b.Loop() {
				if s.tryAcquire() {
					b.Fatal("acquired a full semaphore")
				}
			}
		})
	}
}

// BenchmarkRefusedParallel is the storm case: the semaphore is full and every
// caller is refused.
//
// The parallel benchmarks only measure contention if both goroutines really
// run at once. On a loaded machine they take turns on the cores and measure
// the serial cost again; impl=bare's RefusedParallel against its Refused
// (loads only, so ideally half of it with 2 cores) shows how much
// parallelism a run actually had.
func BenchmarkRefusedParallel(b *testing.B) {
	for _, impl := range impls {
		b.Run(impl.name, func(b *testing.B) {
			s := impl.new(b, 1)
			if !s.tryAcquire() {
				b.Fatal("could not fill semaphore")
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if s.tryAcquire() {
						b.Error("acquired a full semaphore")
						return
					}
				}
			})
		})
	}
}

var sinkErr error

func BenchmarkDo(b *testing.B) {
	ok := func() error { return nil }
	b.Run("state=free", func(b *testing.B) {
		s := mustNew(b, "bench", bigMax)
		b.ReportAllocs()
		for b.Loop() {
			sinkErr = s.Do(ok)
		}
	})
	b.Run("state=busy", func(b *testing.B) {
		s := mustNew(b, "bench", 1, WithRetryAfter(time.Second))
		s.TryAcquire()
		b.ReportAllocs()
		for b.Loop() {
			sinkErr = s.Do(ok)
		}
		if sinkErr == nil {
			b.Fatal("Do on a full semaphore succeeded")
		}
	})
}
