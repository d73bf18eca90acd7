package fanout

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// callWriter records every Write call separately.
type callWriter struct {
	mu    sync.Mutex
	calls []string
}

func (w *callWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.calls = append(w.calls, string(p))
	w.mu.Unlock()
	return len(p), nil
}

func (w *callWriter) snapshot() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.calls)
}

// TestOutboxCoalesces: frames found queued together reach the writer in one
// Write, with a gap notice in place between them; a Write never carries
// more than the coalescing bound, except a frame larger than the bound,
// which is written alone.
func TestOutboxCoalesces(t *testing.T) { outboxModes(t, testOutboxCoalesces) }

func testOutboxCoalesces(t *testing.T, mode []OutboxOption) {
	big := bytes.Repeat([]byte{'B'}, 20)
	for _, tc := range []struct {
		name     string
		opts     []OutboxOption
		offer    [][]byte // before Start, in order; nil: a 2,000-byte frame the byte limit refuses
		want     []string // the Write calls
		frames   uint64
		gaps     uint64
		maxWrite int // no Write larger, except a lone frame larger than it
	}{
		{
			name:   "one write, gap in place",
			offer:  [][]byte{frameN(0), frameN(1), frameN(2), nil, nil, frameN(3), frameN(4)},
			want:   []string{"m:0;m:1;m:2;gap:2;m:3;m:4;"},
			frames: 5, gaps: 1, maxWrite: DefaultCoalesceBytes,
		},
		{
			name:   "bounded by WithCoalesce",
			opts:   []OutboxOption{WithCoalesce(12)},
			offer:  [][]byte{frameN(0), frameN(1), frameN(2), frameN(3), nil, frameN(4), big, frameN(5), frameN(6)},
			want:   []string{"m:0;m:1;m:2;", "m:3;gap:1;", "m:4;", string(big), "m:5;m:6;"},
			frames: 8, gaps: 1, maxWrite: 12,
		},
		{
			name:   "WithCoalesce(0): one write per frame",
			opts:   []OutboxOption{WithCoalesce(0)},
			offer:  [][]byte{frameN(0), nil, frameN(1), frameN(2)},
			want:   []string{"m:0;", "gap:1;", "m:1;", "m:2;"},
			frames: 3, gaps: 1, maxWrite: 6,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wr := &callWriter{}
			opts := append(slices.Clone(mode), WithGapFrame(gapFrame), WithByteLimit(1000))
			o := newOutbox(t, 64, wr, append(opts, tc.opts...)...)
			for i, f := range tc.offer {
				if f == nil {
					f = make([]byte, 2000)
				}
				if got := o.Offer(f); got != (tc.offer[i] != nil) {
					t.Fatalf("Offer %d = %v", i, got)
				}
			}
			o.Start()
			waitUntil(t, "frames written", func() bool {
				st := o.Stats()
				return st.Written == tc.frames && st.Gaps == tc.gaps
			})
			calls := wr.snapshot()
			if !slices.Equal(calls, tc.want) {
				t.Fatalf("Write calls %q, want %q", calls, tc.want)
			}
			for _, c := range calls {
				if len(c) > tc.maxWrite && c != string(big) {
					t.Fatalf("Write of %d bytes, bound %d", len(c), tc.maxWrite)
				}
			}
		})
	}
}

// TestOutboxWriteAllocs: once its buffers have grown, a writer that
// coalesces allocates nothing per Write.
func TestOutboxWriteAllocs(t *testing.T) { outboxModes(t, testOutboxWriteAllocs) }

func testOutboxWriteAllocs(t *testing.T, mode []OutboxOption) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	o := newOutbox(t, 64, &callCountingWriter{w: io.Discard}, mode...)
	o.Start()
	frame := make([]byte, 150)
	// However the writer splits a burst into Writes (it may take the first
	// frames before the rest are offered), it must not allocate.
	burst := func() {
		before := o.Stats().Written
		for range 10 {
			if !o.Offer(frame) {
				t.Fatal("Offer refused")
			}
		}
		for o.Stats().Written < before+10 {
			runtime.Gosched()
		}
	}
	burst()
	if a := testing.AllocsPerRun(200, burst); a != 0 {
		t.Fatalf("%v allocations per burst of 10 frames", a)
	}
}

// waitUntil polls cond, yielding in between, until it holds or waitTimeout
// passes. For conditions no event announces (a goroutine's exit, a counter).
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

// TestWritersBlockedMemberIsolated: a pool of one goroutine whose Write to
// one member blocks (a stream never read) still delivers to every other
// member: at the watchdog's second check the blocked goroutine is replaced.
// Closing the blocked member aborts its Write and ends the replaced
// goroutine.
func TestWritersBlockedMemberIsolated(t *testing.T) {
	checkGoroutines(t)
	tick := make(chan time.Time)
	reg := prometheus.NewRegistry()
	p := newWriters(t, 1, WithStallCheck(tick), WithWritersRegisterer(reg))
	slow := newGateWriter(true) // never opened
	blocked := newOutbox(t, 4, slow, WithWriters(p), WithAbort(slow.Abort))
	blocked.Start()
	blocked.Offer([]byte("stuck"))
	slow.waitFor(t, "the pool goroutine blocked in Write", func() bool { return slow.waiting.Load() == 1 })

	const members, frames = 100, 5
	w := &atomicWriter{reached: make(chan struct{}, 1)}
	w.target.Store(members * frames)
	others := make([]*Outbox, members)
	for i := range others {
		others[i] = newOutbox(t, frames, w, WithWriters(p), WithCoalesce(0))
		others[i].Start()
		for k := range frames {
			if !others[i].Offer(frameN(k)) {
				t.Fatalf("member %d: Offer %d refused", i, k)
			}
		}
	}
	// Two checks see the goroutine in the same Write: the second hands
	// off. (Each send returns once the watchdog has received it, so the
	// first check is over when the second send returns.)
	tick <- time.Time{}
	tick <- time.Time{}
	select {
	case <-w.reached:
	case <-time.After(waitTimeout):
		t.Fatalf("%d of %d frames written to the other members while one member blocks", w.n.Load(), members*frames)
	}
	st := p.Stats()
	if st.Handoffs != 1 || st.Goroutines != 2 {
		t.Fatalf("pool %+v, want 1 handoff and 2 goroutines (1 blocked)", st)
	}
	// Operators see the same on the registry.
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP overlayd_supernode_writers_goroutines Goroutines of the supernode's outbox writer pool: its size, plus those handed off while blocked in a Write to a member that does not read.
# TYPE overlayd_supernode_writers_goroutines gauge
overlayd_supernode_writers_goroutines 2
# HELP overlayd_supernode_writers_handoffs_total Outbox writer goroutines the watchdog replaced because one member's Write blocked past two checks.
# TYPE overlayd_supernode_writers_handoffs_total counter
overlayd_supernode_writers_handoffs_total 1
`)); err != nil {
		t.Fatal(err)
	}
	// Written is counted just after each Write returns.
	waitUntil(t, "every member's counter", func() bool {
		for _, o := range others {
			if o.Stats().Written != frames {
				return false
			}
		}
		return true
	})
	blocked.Close() // aborts the Write; returns once the goroutine lets go
	select {
	case <-blocked.Done():
	default:
		t.Fatal("Close returned before the pool goroutine let go of the Outbox")
	}
	waitUntil(t, "the replaced goroutine to exit", func() bool { return p.Stats().Goroutines == 1 })
}

// atomicWriter counts bytes-agnostic Writes and signals once when the count
// reaches target.
type atomicWriter struct {
	n, target atomic.Int64
	reached   chan struct{}
}

func (w *atomicWriter) Write(p []byte) (int, error) {
	if w.n.Add(1) == w.target.Load() {
		w.reached <- struct{}{}
	}
	return len(p), nil
}

// TestWritersIsolationRealClock is TestWritersBlockedMemberIsolated with
// the default watchdog (a ticker of DefaultStallCheck): no deadline is
// asserted, only that the other members are served.
func TestWritersIsolationRealClock(t *testing.T) {
	checkGoroutines(t)
	p := newWriters(t, 1)
	slow := newGateWriter(true)
	blocked := newOutbox(t, 4, slow, WithWriters(p), WithAbort(slow.Abort))
	blocked.Start()
	blocked.Offer([]byte("stuck"))
	slow.waitFor(t, "the pool goroutine blocked in Write", func() bool { return slow.waiting.Load() == 1 })
	w := &atomicWriter{reached: make(chan struct{}, 1)}
	w.target.Store(50)
	for range 50 {
		o := newOutbox(t, 1, w, WithWriters(p))
		o.Start()
		o.Offer([]byte("x"))
	}
	select {
	case <-w.reached:
	case <-time.After(waitTimeout):
		t.Fatalf("%d of 50 members written while one blocks", w.n.Load())
	}
	if h := p.Stats().Handoffs; h < 1 {
		t.Fatalf("%d handoffs", h)
	}
}

// TestWritersOrderConcurrentOffers: several producers offer to many
// Outboxes at once through a pool of two goroutines (and a watchdog that
// may hand off): every member receives every frame, and each producer's
// frames in the order offered.
func TestWritersOrderConcurrentOffers(t *testing.T) {
	checkGoroutines(t)
	p := newWriters(t, 2)
	const members, producers, perProducer = 40, 4, 300
	recs := make([]*streamRecorder, members)
	boxes := make([]*Outbox, members)
	for i := range boxes {
		recs[i] = &streamRecorder{}
		boxes[i] = newOutbox(t, producers*perProducer, recs[i], WithWriters(p))
		boxes[i].Start()
	}
	var wg sync.WaitGroup
	for pr := range producers {
		wg.Go(func() {
			for seq := range perProducer {
				f := msg{producer: uint16(pr), seq: uint64(seq)}.frame()
				for i, o := range boxes {
					if !o.Offer(f) {
						t.Errorf("member %d refused producer %d seq %d", i, pr, seq)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	waitUntil(t, "all frames written", func() bool {
		for _, o := range boxes {
			if o.Stats().Written < producers*perProducer {
				return false
			}
		}
		return true
	})
	for i, r := range recs {
		got := r.msgs(t)
		if len(got) != producers*perProducer {
			t.Fatalf("member %d: %d frames", i, len(got))
		}
		next := make([]uint64, producers)
		for _, m := range got {
			if m.seq != next[m.producer] {
				t.Fatalf("member %d: producer %d seq %d, want %d", i, m.producer, m.seq, next[m.producer])
			}
			next[m.producer]++
		}
	}
}

// streamRecorder keeps the byte stream written to it (12-byte msg frames,
// possibly several per Write).
type streamRecorder struct {
	mu  sync.Mutex
	buf []byte
}

func (r *streamRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.buf = append(r.buf, p...)
	r.mu.Unlock()
	return len(p), nil
}

func (r *streamRecorder) msgs(t *testing.T) []msg {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.buf)%12 != 0 {
		t.Fatalf("stream of %d bytes is not whole frames", len(r.buf))
	}
	var out []msg
	for b := r.buf; len(b) > 0; b = b[12:] {
		out = append(out, parseMsg(b))
	}
	return out
}

// TestFanoutPooledOutboxAllocsIndependentOfMembers: a Fanout through
// Outboxes written by a pool, timed until every member's frame is written,
// allocates the same for 10 and for 10,000 members (nothing: the engine
// preallocates its jobs, Offer and the pool's ready list allocate nothing,
// the pool goroutines reuse their buffers).
func TestFanoutPooledOutboxAllocsIndependentOfMembers(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	checkGoroutines(t)
	e := newEngine(t, 2)
	p := newWriters(t, 2, WithStallCheck(make(chan time.Time)))
	frame := make([]byte, 150)
	ch := make(chan Result, 1)
	done := func(r Result) { ch <- r }
	allocs := map[int]float64{}
	for _, n := range []int{10, 10000} {
		g := e.NewGroup()
		w := &atomicWriter{reached: make(chan struct{}, 1)}
		for i := range n {
			o := newOutbox(t, 4, w, WithWriters(p))
			o.Start()
			g.Add(fmt.Sprintf("peer-%d", i), o)
		}
		var target int64
		timeout := time.After(waitTimeout) // not in the closure: time.After allocates
		allocs[n] = testing.AllocsPerRun(50, func() {
			target += int64(n)
			w.target.Store(target)
			if err := e.Fanout(g, frame, done); err != nil {
				t.Fatal(err)
			}
			if r := <-ch; r.Delivered != n {
				t.Fatalf("delivered %d, want %d", r.Delivered, n)
			}
			select {
			case <-w.reached:
			case <-timeout:
				t.Fatal("frames not written")
			}
		})
	}
	t.Logf("allocs per Fanout through pooled Outboxes: %v", allocs)
	if allocs[10] != allocs[10000] {
		t.Fatalf("allocs per Fanout: 10 members %v, 10,000 members %v; want the same", allocs[10], allocs[10000])
	}
}

// TestWritersLifecycle: Close is idempotent, works on a pool never started,
// and Start after Close does nothing; NewWriters validates.
func TestWritersLifecycle(t *testing.T) {
	checkGoroutines(t)
	p, err := NewWriters(3)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	p.Start()
	if st := p.Stats(); st.Goroutines != 0 || st.Size != 3 {
		t.Fatalf("closed pool %+v", st)
	}
	q := newWriters(t, 0)
	if st := q.Stats(); st.Size != runtime.GOMAXPROCS(0) || st.Goroutines != st.Size {
		t.Fatalf("pool %+v, want GOMAXPROCS goroutines", st)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(q.Close)
	}
	wg.Wait()
	if _, err := NewWriters(1, WithStallCheck(nil)); err == nil {
		t.Fatal("WithStallCheck(nil) accepted")
	}
	if _, err := NewWriters(1 << 13); err == nil {
		t.Fatal("8,192 goroutines accepted")
	}
	if _, err := NewOutbox(1, &callWriter{}, WithWriters(nil)); err == nil {
		t.Fatal("WithWriters(nil) accepted")
	}
	if _, err := NewOutbox(1, &callWriter{}, WithCoalesce(-1)); err == nil {
		t.Fatal("WithCoalesce(-1) accepted")
	}
}
