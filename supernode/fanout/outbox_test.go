package fanout

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

func gapFrame(n uint64) []byte { return fmt.Appendf(nil, "gap:%d;", n) }

func frameN(k int) []byte { return fmt.Appendf(nil, "m:%d;", k) }

func newOutbox(t testing.TB, limit int, w io.Writer, opts ...OutboxOption) *Outbox {
	t.Helper()
	o, err := NewOutbox(limit, w, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Close)
	return o
}

func TestOutboxWritesInOrder(t *testing.T) { outboxModes(t, testOutboxWritesInOrder) }

func testOutboxWritesInOrder(t *testing.T, mode []OutboxOption) {
	wr := newGateWriter(false)
	o := newOutbox(t, 1000, wr, append(mode, WithGapFrame(gapFrame))...)
	var want strings.Builder
	for k := range 300 {
		if k == 100 {
			o.Start() // frames offered before Start are queued
		}
		if !o.Offer(frameN(k)) {
			t.Fatalf("Offer %d refused with room in the queue", k)
		}
		want.Write(frameN(k))
	}
	wr.waitFor(t, "all frames", func() bool { return wr.String() == want.String() })
	o.Close()
	if st := o.Stats(); st.Written != 300 || st.Dropped != 0 || st.Gaps != 0 || st.Queued != 0 {
		t.Fatalf("stats %+v", st)
	}
	if o.Offer([]byte("late")) {
		t.Fatal("Offer accepted after Close")
	}
}

// TestOutboxGap checks the overflow policy: drop newest, count, and write
// one gap notice exactly where the dropped frames were.
func TestOutboxGap(t *testing.T) {
	for _, tc := range []struct {
		name string
		gap  bool
		run  func(t *testing.T, o *Outbox, wr *gateWriter)
		want string
		st   OutboxStats // Written, Dropped, Gaps compared
	}{
		{
			// Queue fills before the writer starts; the gap is told when
			// the queue drains even though no newer frame comes.
			name: "gap told when drained",
			gap:  true,
			run: func(t *testing.T, o *Outbox, wr *gateWriter) {
				offer(t, o, 0, 5, 3) // limit 3: 0..2 queued, 3..4 dropped
				o.Start()
				wr.open()
			},
			want: "m:0;m:1;m:2;gap:2;",
			st:   OutboxStats{Written: 3, Dropped: 2, Gaps: 1},
		},
		{
			// Drops while the writer is busy, then room frees and a newer
			// frame is queued: the gap sits between the frames queued
			// before the drops and the newer frame, not before the next
			// write.
			name: "gap placed between old and new frames",
			gap:  true,
			run: func(t *testing.T, o *Outbox, wr *gateWriter) {
				offer(t, o, 0, 1, 1) // m0 queued
				o.Start()
				wr.waitFor(t, "writer blocked on m0", func() bool { return wr.waiting.Load() == 1 })
				offer(t, o, 1, 5, 2) // m1, m2 queued (limit 3 with m0), m3, m4 dropped
				wr.step()            // m0 written; m1, m2 next batch
				wr.waitFor(t, "writer blocked on m1", func() bool { return wr.waiting.Load() == 1 && o.Stats().Queued == 2 })
				offer(t, o, 5, 6, 1) // m5 queued after the drops
				offer(t, o, 6, 8, 0) // full again: m6, m7 dropped
				wr.open()
			},
			want: "m:0;m:1;m:2;gap:2;m:5;gap:2;",
			st:   OutboxStats{Written: 4, Dropped: 4, Gaps: 2},
		},
		{
			name: "no gap function: drops only counted",
			run: func(t *testing.T, o *Outbox, wr *gateWriter) {
				offer(t, o, 0, 10, 3)
				o.Start()
				wr.open()
			},
			want: "m:0;m:1;m:2;",
			st:   OutboxStats{Written: 3, Dropped: 7},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outboxModes(t, func(t *testing.T, mode []OutboxOption) {
				wr := newGateWriter(true)
				opts := mode
				if tc.gap {
					opts = append(opts, WithGapFrame(gapFrame))
				}
				o := newOutbox(t, 3, wr, append(opts, WithAbort(wr.Abort))...)
				tc.run(t, o, wr)
				wr.waitFor(t, "output", func() bool { return wr.String() == tc.want })
				o.Close()
				st := o.Stats()
				if st.Written != tc.st.Written || st.Dropped != tc.st.Dropped || st.Gaps != tc.st.Gaps {
					t.Fatalf("stats %+v, want written %d dropped %d gaps %d", st, tc.st.Written, tc.st.Dropped, tc.st.Gaps)
				}
				if got := wr.String(); got != tc.want {
					t.Fatalf("written %q, want %q", got, tc.want)
				}
			})
		})
	}
}

// offer offers frames [from, to) and checks that exactly the first accept
// of them are accepted.
func offer(t *testing.T, o *Outbox, from, to, accept int) {
	t.Helper()
	for k := from; k < to; k++ {
		if got, want := o.Offer(frameN(k)), k-from < accept; got != want {
			t.Fatalf("Offer(m:%d) = %v, want %v (stats %+v)", k, got, want, o.Stats())
		}
		if q := o.Stats().Queued; q > o.Stats().Limit {
			t.Fatalf("queued %d > limit", q)
		}
	}
}

type failWriter struct {
	mu sync.Mutex
	n  int
}

var errWrite = errors.New("stream reset")

func (w *failWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n++
	if w.n == 2 {
		return 0, errWrite
	}
	return len(p), nil
}

func TestOutboxWriteErrorStops(t *testing.T) { outboxModes(t, testOutboxWriteErrorStops) }

func testOutboxWriteErrorStops(t *testing.T, mode []OutboxOption) {
	// One Write per frame, so that the second frame's Write fails.
	o := newOutbox(t, 8, &failWriter{}, append(mode, WithCoalesce(0))...)
	for k := range 5 {
		o.Offer(frameN(k))
	}
	o.Start()
	select { // the writer stops on the second Write
	case <-o.Done():
	case <-time.After(waitTimeout):
		t.Fatal("writer did not stop on a write error")
	}
	o.Close()
	if err := o.Err(); !errors.Is(err, errWrite) {
		t.Fatalf("Err = %v, want %v", err, errWrite)
	}
	if st := o.Stats(); st.Written != 1 || st.Queued != 0 {
		t.Fatalf("stats %+v, want 1 written and nothing queued", st)
	}
	if o.Offer([]byte("x")) {
		t.Fatal("Offer accepted after a write error")
	}
}

func TestOutboxCloseUnblocksWriter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start bool
	}{{"writer blocked in Write", true}, {"never started", false}} {
		t.Run(tc.name, func(t *testing.T) {
			outboxModes(t, func(t *testing.T, mode []OutboxOption) {
				wr := newGateWriter(true) // never opened: a peer that never reads
				o, err := NewOutbox(2, wr, append(mode, WithAbort(wr.Abort))...)
				if err != nil {
					t.Fatal(err)
				}
				o.Offer([]byte("a"))
				if tc.start {
					o.Start()
					wr.waitFor(t, "writer blocked", func() bool { return wr.waiting.Load() == 1 })
				}
				o.Close()
				if tc.start {
					select {
					case <-o.Done():
					default:
						t.Fatal("Close returned before the writer goroutine")
					}
				}
				var wg sync.WaitGroup
				for range 3 {
					wg.Go(o.Close)
				}
				wg.Wait()
				o.Start() // no-op after Close
				if o.Offer([]byte("b")) {
					t.Fatal("Offer accepted after Close")
				}
				if err := o.Err(); err != nil {
					t.Fatalf("Err after Close = %v, want nil (the abort is ours)", err)
				}
			})
		})
	}
}

func TestOutboxOfferAllocs(t *testing.T) { outboxModes(t, testOutboxOfferAllocs) }

func testOutboxOfferAllocs(t *testing.T, mode []OutboxOption) {
	o, err := NewOutbox(1<<20, io.Discard, mode...) // not started: frames stay queued
	if err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, 150)
	if a := testing.AllocsPerRun(1000, func() { o.Offer(frame) }); a != 0 {
		t.Fatalf("Offer allocates %v per call", a)
	}
	full, err := NewOutbox(1, io.Discard, mode...)
	if err != nil {
		t.Fatal(err)
	}
	full.Offer(frame)
	if a := testing.AllocsPerRun(1000, func() { full.Offer(frame) }); a != 0 {
		t.Fatalf("Offer to a full outbox allocates %v per call", a)
	}
}

func TestNewOutboxValidates(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int
		w     io.Writer
		opts  []OutboxOption
	}{
		{"zero limit", 0, io.Discard, nil},
		{"nil writer", 1, nil, nil},
		{"nil gap", 1, io.Discard, []OutboxOption{WithGapFrame(nil)}},
		{"nil abort", 1, io.Discard, []OutboxOption{WithAbort(nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewOutbox(tc.limit, tc.w, tc.opts...); err == nil {
				t.Fatal("NewOutbox accepted bad arguments")
			}
		})
	}
}
