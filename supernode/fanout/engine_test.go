package fanout

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// TestFanoutOrderExactlyOnce sends messages to several overlapping groups
// from several goroutines at once and checks that every member got every
// message of its groups exactly once, each producer's messages in the order
// produced, and that all members of a group saw the group's messages in the
// same order.
func TestFanoutOrderExactlyOnce(t *testing.T) {
	checkGoroutines(t)
	const (
		producers = 4
		perProd   = 150
		groups    = 3
		members   = 240
	)
	e := newEngine(t, 4, WithMaxJobs(producers*perProd), WithYieldEvery(7))
	sinks := make([]*recSink, members)
	gs := make([]*Group, groups)
	in := func(i, g int) bool { return i%(g+2) == 0 || i%7 == g } // overlapping memberships
	for g := range gs {
		gs[g] = e.NewGroup()
	}
	for i := range sinks {
		sinks[i] = &recSink{}
		for g := range gs {
			if in(i, g) {
				gs[g].Add(fmt.Sprintf("peer-%d", i), sinks[i])
			}
		}
	}

	w := newWaiter()
	var wg sync.WaitGroup
	sent := make([][groups]uint64, producers) // sent[p][g]: messages p sent to g
	for p := range producers {
		wg.Go(func() {
			for k := range perProd {
				g := (p + k*k) % groups
				m := msg{producer: uint16(p), group: uint16(g), seq: sent[p][g]}
				sent[p][g]++
				if err := e.Fanout(gs[g], m.frame(), w.done); err != nil {
					t.Errorf("Fanout: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	w.wait(t, producers*perProd)

	order := make([][]msg, groups) // the first member's view of each group
	for i, s := range sinks {
		got := s.msgs()
		next := make([][groups]uint64, producers)
		for _, m := range got {
			if !in(i, int(m.group)) {
				t.Fatalf("peer-%d got %+v from group %d, not a member", i, m, m.group)
			}
			if want := next[m.producer][m.group]; m.seq != want {
				t.Fatalf("peer-%d: from producer %d to group %d got seq %d, want %d (lost, duplicated or reordered)", i, m.producer, m.group, m.seq, want)
			}
			next[m.producer][m.group]++
		}
		for g := range groups {
			if !in(i, g) {
				continue
			}
			for p := range producers {
				if next[p][g] != sent[p][g] {
					t.Fatalf("peer-%d got %d of producer %d's %d messages to group %d", i, next[p][g], p, sent[p][g], g)
				}
			}
			view := slices.DeleteFunc(slices.Clone(got), func(m msg) bool { return int(m.group) != g })
			if order[g] == nil {
				order[g] = view
			} else if !slices.Equal(order[g], view) {
				t.Fatalf("peer-%d saw group %d's messages in another order than the group's first member", i, g)
			}
		}
	}
	want := 0
	for g := range groups {
		want += gs[g].Len() * len(order[g])
	}
	if got := w.total(); got.Delivered != want || got.Dropped != 0 {
		t.Fatalf("results sum to %+v, want %d delivered", got, want)
	}
}

func TestWorkerStable(t *testing.T) {
	ids := make([]string, 20000)
	for i := range ids {
		// peer IDs share a long prefix
		ids[i] = fmt.Sprintf("12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSC%06d", i)
	}
	for _, tc := range []struct {
		name    string
		workers int
	}{
		{"1 worker", 1},
		{"2 workers", 2},
		{"3 workers", 3},
		{"8 workers", 8},
		{"64 workers", 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e1, err := New(tc.workers)
			if err != nil {
				t.Fatal(err)
			}
			e2, err := New(tc.workers)
			if err != nil {
				t.Fatal(err)
			}
			hist := make([]int, tc.workers)
			for _, id := range ids {
				w := e1.Worker(id)
				if w < 0 || w >= tc.workers {
					t.Fatalf("Worker(%q) = %d, out of [0,%d)", id, w, tc.workers)
				}
				if e1.Worker(id) != w || e2.Worker(id) != w {
					t.Fatalf("Worker(%q) not stable: %d, %d, %d", id, w, e1.Worker(id), e2.Worker(id))
				}
				hist[w]++
			}
			// Each worker within ±15% of its share (binomial sd at 64
			// workers is ~4% of the share, so this is ~4 sd).
			mean := float64(len(ids)) / float64(tc.workers)
			for w, n := range hist {
				if float64(n) < 0.85*mean || float64(n) > 1.15*mean {
					t.Errorf("worker %d got %d of %d ids, want %.0f ± 15%%", w, n, len(ids), mean)
				}
			}
		})
	}

	// A group places every member on Worker(id), in every group.
	e := newEngine(t, 3)
	g1, g2 := e.NewGroup(), e.NewGroup()
	for _, id := range ids[:500] {
		s := &countSink{}
		g1.Add(id, s)
		g2.Add(id, s)
		for _, g := range []*Group{g1, g2} {
			if w, ok := g.workerOfForTest(id, s); w != e.Worker(id) || !ok {
				t.Fatalf("member %q placed on worker %d (sink found %v), Worker says %d", id, w, ok, e.Worker(id))
			}
		}
	}
}

// TestSlowMemberDoesNotDelayOthers puts one member whose stream never
// drains (a writer blocked in Write) among fast members: every job still
// completes for everybody else, the slow member's Outbox stays within its
// limit and counts its drops, and when its writer resumes it gets the queued
// frames, then one gap notice, then newer frames.
func TestSlowMemberDoesNotDelayOthers(t *testing.T) {
	checkGoroutines(t)
	const (
		fast  = 1000
		limit = 4
		jobs  = 20
	)
	e := newEngine(t, 2)
	g := e.NewGroup()
	fastSinks := make([]*atomicCountSink, fast)
	for i := range fastSinks {
		fastSinks[i] = &atomicCountSink{}
		g.Add(fmt.Sprintf("fast-%d", i), fastSinks[i])
	}
	wr := newGateWriter(true) // blocks every Write until opened
	slow, err := NewOutbox(limit, wr, WithAbort(wr.Abort),
		WithGapFrame(func(n uint64) []byte { return fmt.Appendf(nil, "gap:%d;", n) }))
	if err != nil {
		t.Fatal(err)
	}
	slow.Start()
	t.Cleanup(slow.Close)
	g.Add("slow", slow)

	w := newWaiter()
	for k := range jobs {
		if err := e.Fanout(g, fmt.Appendf(nil, "m:%d;", k), w.done); err != nil {
			t.Fatalf("Fanout %d: %v", k, err)
		}
	}
	// All jobs finish while the slow writer is still blocked.
	w.wait(t, jobs)
	for i, s := range fastSinks {
		if n := s.n.Load(); n != jobs {
			t.Fatalf("fast-%d got %d frames, want %d", i, n, jobs)
		}
	}
	st := slow.Stats()
	if st.Queued != limit || st.Dropped != jobs-limit || st.Written != 0 {
		t.Fatalf("slow outbox stats %+v, want %d queued (the limit), %d dropped, 0 written", st, limit, jobs-limit)
	}
	if got, want := w.total(), (Result{Delivered: fast*jobs + limit, Dropped: jobs - limit}); got != want {
		t.Fatalf("results sum to %+v, want %+v", got, want)
	}

	// The writer resumes: the queued frames, then the gap notice; a frame
	// fanned out after that follows the notice.
	wr.open()
	want := fmt.Sprintf("m:0;m:1;m:2;m:3;gap:%d;", jobs-limit)
	wr.waitFor(t, "the slow member to catch up", func() bool { return wr.String() == want })
	if err := e.Fanout(g, []byte("m:new;"), w.done); err != nil {
		t.Fatal(err)
	}
	w.wait(t, 1)
	want += "m:new;"
	wr.waitFor(t, "the new frame", func() bool { return wr.String() == want })
	slow.Close()
	if st := slow.Stats(); st.Written != limit+1 || st.Gaps != 1 || st.Dropped != jobs-limit {
		t.Fatalf("after resume: stats %+v, want %d written, 1 gap, %d dropped", st, limit+1, jobs-limit)
	}
}

// TestAddRemoveDuringFanout changes membership while several goroutines fan
// out. Stable members get every message exactly once, in order per
// producer; a removed member never gets a message submitted after its
// Remove returned.
func TestAddRemoveDuringFanout(t *testing.T) {
	checkGoroutines(t)
	const (
		producers = 2
		perProd   = 300
		stable    = 50
		churners  = 2
		cycles    = 150
	)
	e := newEngine(t, 2, WithMaxJobs(producers*perProd), WithYieldEvery(3))
	g := e.NewGroup()
	stableSinks := make([]*recSink, stable)
	for i := range stableSinks {
		stableSinks[i] = &recSink{}
		g.Add(fmt.Sprintf("stable-%d", i), stableSinks[i])
	}

	var seq atomic.Uint64 // assigned before each Fanout call
	type churned struct {
		s   *recSink
		cut uint64 // seq counter read after Remove returned
	}
	var (
		mu   sync.Mutex
		gone []churned
	)
	w := newWaiter()
	var wg sync.WaitGroup
	for c := range churners {
		wg.Go(func() {
			for k := range cycles {
				id := fmt.Sprintf("churn-%d-%d", c, k)
				s := &recSink{}
				g.Add(id, s)
				if k%3 == 0 {
					g.Add(id, s) // replace with itself: copy path
				}
				g.Remove(id)
				cut := seq.Load()
				mu.Lock()
				gone = append(gone, churned{s, cut})
				mu.Unlock()
			}
		})
	}
	for p := range producers {
		wg.Go(func() {
			for range perProd {
				m := msg{producer: uint16(p), seq: seq.Add(1)}
				if err := e.Fanout(g, m.frame(), w.done); err != nil {
					t.Errorf("Fanout: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	w.wait(t, producers*perProd)

	if g.Len() != stable {
		t.Fatalf("Len = %d after churn, want %d", g.Len(), stable)
	}
	for i, s := range stableSinks {
		got := s.msgs()
		if len(got) != producers*perProd {
			t.Fatalf("stable-%d got %d messages, want %d", i, len(got), producers*perProd)
		}
		last := make([]uint64, producers)
		for _, m := range got {
			if m.seq <= last[m.producer] {
				t.Fatalf("stable-%d: producer %d's seq %d after %d", i, m.producer, m.seq, last[m.producer])
			}
			last[m.producer] = m.seq
		}
	}
	for _, c := range gone {
		for _, m := range c.s.msgs() {
			if m.seq > c.cut {
				t.Fatalf("removed member got seq %d, submitted after its Remove returned (counter was %d)", m.seq, c.cut)
			}
		}
	}
}

// TestFanoutAllocsIndependentOfMembers checks that a Fanout, done callback
// included, allocates the same (nothing) for 10 and 10,000 members.
func TestFanoutAllocsIndependentOfMembers(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	e := newEngine(t, 2)
	frame := make([]byte, 150)
	ch := make(chan Result, 1)
	done := func(r Result) { ch <- r }
	allocs := map[int]float64{}
	for _, n := range []int{10, 10000} {
		g := e.NewGroup()
		for i := range n {
			g.Add(fmt.Sprintf("peer-%d", i), &countSink{})
		}
		allocs[n] = testing.AllocsPerRun(200, func() {
			if err := e.Fanout(g, frame, done); err != nil {
				t.Fatal(err)
			}
			if r := <-ch; r.Delivered != n {
				t.Fatalf("delivered %d, want %d", r.Delivered, n)
			}
		})
	}
	t.Logf("allocs per Fanout: %v", allocs)
	if allocs[10] != allocs[10000] || allocs[10000] != 0 {
		t.Fatalf("allocs per Fanout: 10 members %v, 10,000 members %v; want 0 for both", allocs[10], allocs[10000])
	}
}

// gateSink blocks in Offer until released: a Sink that breaks the
// non-blocking contract, used only to hold a worker still.
type gateSink struct {
	entered chan struct{}
	release chan struct{}
}

func (s *gateSink) Offer([]byte) bool {
	s.entered <- struct{}{}
	<-s.release
	return true
}

func TestFanoutBusyWhenQueueFull(t *testing.T) {
	checkGoroutines(t)
	e := newEngine(t, 1, WithMaxJobs(2))
	g := e.NewGroup()
	gate := &gateSink{entered: make(chan struct{}, 8), release: make(chan struct{})}
	g.Add("gate", gate)
	w := newWaiter()

	if err := e.Fanout(g, []byte("a"), w.done); err != nil {
		t.Fatal(err)
	}
	<-gate.entered // the worker holds job 1
	if err := e.Fanout(g, []byte("b"), w.done); err != nil {
		t.Fatal(err) // job 2 is queued
	}
	for range 3 {
		if err := e.Fanout(g, []byte("c"), w.done); !errors.Is(err, ErrBusy) {
			t.Fatalf("third job in flight: err %v, want ErrBusy", err)
		}
	}
	if n := e.InFlight(); n != 2 {
		t.Fatalf("InFlight = %d, want 2", n)
	}
	close(gate.release)
	w.wait(t, 2)
	if err := e.Fanout(g, []byte("d"), w.done); err != nil {
		t.Fatalf("after the queue drained: %v", err)
	}
	w.wait(t, 1)
	if got := w.total(); got.Delivered != 3 {
		t.Fatalf("delivered %d, want 3 (refused jobs must not run)", got.Delivered)
	}
}

func TestEngineLifecycle(t *testing.T) {
	frame := []byte("x")
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, e *Engine, g *Group)
	}{
		{"fanout before start", func(t *testing.T, e *Engine, g *Group) {
			if err := e.Fanout(g, frame, nil); !errors.Is(err, ErrNotStarted) {
				t.Fatalf("err %v, want ErrNotStarted", err)
			}
			e.Close()
		}},
		{"close without start, twice", func(t *testing.T, e *Engine, g *Group) {
			e.Close()
			e.Close()
			e.Start() // no-op after Close
			if err := e.Fanout(g, frame, nil); !errors.Is(err, ErrClosed) {
				t.Fatalf("err %v, want ErrClosed", err)
			}
		}},
		{"close idempotent and concurrent", func(t *testing.T, e *Engine, g *Group) {
			e.Start()
			e.Start()
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(e.Close)
			}
			wg.Wait()
			e.Close()
			if err := e.Fanout(g, frame, nil); !errors.Is(err, ErrClosed) {
				t.Fatalf("err %v, want ErrClosed", err)
			}
		}},
		{"close finishes accepted jobs", func(t *testing.T, e *Engine, g *Group) {
			e.Start()
			var n atomic.Int32
			for range 100 {
				if err := e.Fanout(g, frame, func(Result) { n.Add(1) }); err != nil {
					t.Fatal(err)
				}
			}
			e.Close()
			if n.Load() != 100 {
				t.Fatalf("%d done callbacks ran by Close, want 100", n.Load())
			}
		}},
		{"done may fanout", func(t *testing.T, e *Engine, g *Group) {
			e.Start()
			w := newWaiter()
			if err := e.Fanout(g, frame, func(Result) {
				if err := e.Fanout(g, frame, w.done); err != nil {
					t.Errorf("Fanout from done: %v", err)
				}
			}); err != nil {
				t.Fatal(err)
			}
			w.wait(t, 1)
			e.Close()
		}},
		{"empty group reports", func(t *testing.T, e *Engine, _ *Group) {
			e.Start()
			w := newWaiter()
			if err := e.Fanout(e.NewGroup(), frame, w.done); err != nil {
				t.Fatal(err)
			}
			w.wait(t, 1)
			if got := w.total(); got != (Result{}) {
				t.Fatalf("empty group result %+v", got)
			}
			e.Close()
		}},
		{"foreign or nil group", func(t *testing.T, e *Engine, _ *Group) {
			e.Start()
			other, err := New(2)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Fanout(other.NewGroup(), frame, nil); err == nil {
				t.Fatal("Fanout accepted another engine's group")
			}
			if err := e.Fanout(nil, frame, nil); err == nil {
				t.Fatal("Fanout accepted a nil group")
			}
			e.Close()
			other.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkGoroutines(t)
			e, err := New(3, WithMaxJobs(128))
			if err != nil {
				t.Fatal(err)
			}
			g := e.NewGroup()
			for i := range 10 {
				g.Add(fmt.Sprintf("p%d", i), &atomicCountSink{})
			}
			tc.run(t, e, g)
		})
	}
}

func TestNewOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers int
		opts    []Option
		ok      bool
		want    int
	}{
		{"default workers", 0, nil, true, 0},
		{"explicit workers", 5, nil, true, 5},
		{"too many workers", 1 << 13, nil, false, 0},
		{"zero max jobs", 1, []Option{WithMaxJobs(0)}, false, 0},
		{"nil registerer", 1, []Option{WithRegisterer(nil)}, false, 0},
		{"nil clock", 1, []Option{WithClock(nil)}, false, 0},
		{"negative yield", 1, []Option{WithYieldEvery(-1)}, false, 0},
		{"never yield", 1, []Option{WithYieldEvery(0)}, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(tc.workers, tc.opts...)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if err == nil && tc.want != 0 && e.Workers() != tc.want {
				t.Fatalf("Workers = %d, want %d", e.Workers(), tc.want)
			}
			if err == nil && tc.workers == 0 && e.Workers() < 1 {
				t.Fatalf("Workers = %d for the default", e.Workers())
			}
		})
	}
}
