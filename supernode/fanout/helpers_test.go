package fanout

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitTimeout bounds every wait in the tests; a correct run needs far less.
const waitTimeout = 30 * time.Second

// checkGoroutines fails the test if, after its cleanups, more goroutines run
// than before it. Register it first so that it runs last.
func checkGoroutines(t testing.TB) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Errorf("goroutine leak: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
				return
			}
			runtime.Gosched() // exiting goroutines finish after wg.Done / close
		}
	})
}

// newEngine returns a started engine closed at cleanup.
func newEngine(t testing.TB, workers int, opts ...Option) *Engine {
	t.Helper()
	e, err := New(workers, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.Start()
	t.Cleanup(e.Close)
	return e
}

// waiter collects done callbacks.
type waiter struct {
	mu      sync.Mutex
	results []Result
	ch      chan struct{}
}

func newWaiter() *waiter { return &waiter{ch: make(chan struct{}, 1<<16)} }

func (w *waiter) done(r Result) {
	w.mu.Lock()
	w.results = append(w.results, r)
	w.mu.Unlock()
	w.ch <- struct{}{}
}

// wait waits for n more done callbacks.
func (w *waiter) wait(t testing.TB, n int) {
	t.Helper()
	timeout := time.After(waitTimeout)
	for range n {
		select {
		case <-w.ch:
		case <-timeout:
			t.Fatalf("timed out waiting for done callbacks")
		}
	}
}

func (w *waiter) total() Result {
	w.mu.Lock()
	defer w.mu.Unlock()
	var sum Result
	for _, r := range w.results {
		sum.Delivered += r.Delivered
		sum.Dropped += r.Dropped
	}
	return sum
}

// msg is the test frame layout: producer, group, sequence number.
type msg struct {
	producer, group uint16
	seq             uint64
}

func (m msg) frame() []byte {
	b := make([]byte, 12)
	binary.BigEndian.PutUint16(b, m.producer)
	binary.BigEndian.PutUint16(b[2:], m.group)
	binary.BigEndian.PutUint64(b[4:], m.seq)
	return b
}

func parseMsg(b []byte) msg {
	return msg{binary.BigEndian.Uint16(b), binary.BigEndian.Uint16(b[2:]), binary.BigEndian.Uint64(b[4:])}
}

// recSink records every frame offered to it and always accepts.
type recSink struct {
	mu  sync.Mutex
	got []msg
}

func (s *recSink) Offer(frame []byte) bool {
	m := parseMsg(frame)
	s.mu.Lock()
	s.got = append(s.got, m)
	s.mu.Unlock()
	return true
}

func (s *recSink) msgs() []msg {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]msg(nil), s.got...)
}

// countSink counts frames and bytes. It is not synchronised: the engine
// offers to one member from one worker only.
type countSink struct {
	frames, bytes int64
}

func (s *countSink) Offer(frame []byte) bool {
	s.frames++
	s.bytes += int64(len(frame))
	return true
}

// atomicCountSink counts frames, readable while offers run.
type atomicCountSink struct{ n atomic.Int64 }

func (s *atomicCountSink) Offer([]byte) bool { s.n.Add(1); return true }

// refuseSink refuses every frame.
type refuseSink struct{}

func (refuseSink) Offer([]byte) bool { return false }

var errAborted = errors.New("test writer aborted")

// gateWriter records what is written to it. If gated, each Write first waits
// for a token on allow (or for abort, which fails it). changed is signalled
// when a Write starts waiting and when it has recorded its bytes, so that
// waitFor can re-check a condition on every step of the writer.
type gateWriter struct {
	allow   chan struct{}
	abort   chan struct{}
	aborted sync.Once
	changed chan struct{}
	waiting atomic.Int32 // Writes blocked on allow

	mu  sync.Mutex
	buf bytes.Buffer
}

func newGateWriter(gated bool) *gateWriter {
	w := &gateWriter{abort: make(chan struct{}), changed: make(chan struct{}, 1)}
	if gated {
		w.allow = make(chan struct{})
	}
	return w
}

func (w *gateWriter) signal() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *gateWriter) Write(p []byte) (int, error) {
	if w.allow != nil {
		w.waiting.Add(1)
		w.signal()
		select {
		case <-w.allow:
		case <-w.abort:
			w.waiting.Add(-1)
			return 0, errAborted
		}
		w.waiting.Add(-1)
	}
	w.mu.Lock()
	w.buf.Write(p)
	w.mu.Unlock()
	w.signal()
	return len(p), nil
}

// step lets one Write through.
func (w *gateWriter) step() { w.allow <- struct{}{} }

// open lets every later Write through.
func (w *gateWriter) open() { close(w.allow) }

// Abort fails the blocked and later Writes of a gated writer.
func (w *gateWriter) Abort() { w.aborted.Do(func() { close(w.abort) }) }

func (w *gateWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitFor waits until cond holds, re-checking it on every step of the
// writer. cond must become true at such a step.
func (w *gateWriter) waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(waitTimeout)
	for !cond() {
		select {
		case <-w.changed:
		case <-timeout:
			got := w.String()
			if len(got) > 200 {
				got = "…" + got[len(got)-200:]
			}
			t.Fatalf("timed out waiting for %s; written so far %q", what, got)
		}
	}
}

// outboxModes runs f twice, checking for leaked goroutines each time: with
// Outboxes that have a writer goroutine of their own (no option) and with
// Outboxes written by a started pool of two goroutines (mode holds
// WithWriters) whose watchdog never ticks, so that no Write is handed off.
// f passes mode first to every NewOutbox.
func outboxModes(t *testing.T, f func(t *testing.T, mode []OutboxOption)) {
	t.Helper()
	t.Run("own", func(t *testing.T) {
		checkGoroutines(t)
		f(t, nil)
	})
	t.Run("pool", func(t *testing.T) {
		checkGoroutines(t)
		p := newWriters(t, 2, WithStallCheck(make(chan time.Time)))
		f(t, []OutboxOption{WithWriters(p)})
	})
}

// newWriters returns a started pool closed at cleanup (after the cleanups
// registered later, such as its Outboxes').
func newWriters(t testing.TB, size int, opts ...WritersOption) *Writers {
	t.Helper()
	p, err := NewWriters(size, opts...)
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	t.Cleanup(p.Close)
	return p
}
