package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestReplayAppendAndRepeats(t *testing.T) {
	ts := openTest(t, Limits{})
	if _, ok := ts.ReplayLast("g"); ok {
		t.Fatal("ReplayLast of an empty log reported ok")
	}
	if _, _, ok := ts.ReplayAfter("g", 0, 0, 0); ok {
		t.Fatal("ReplayAfter of an empty log reported ok")
	}
	ts.mustAppend(t, "g", entry(1, 1), entry(1, 2), entry(1, 3))
	// Repeats (a replica or a resync sending again) are ignored, also
	// within one call; the new entry after them is kept.
	repeat := entry(1, 2)
	repeat.Data = []byte("changed")
	ts.mustAppend(t, "g", repeat, entry(1, 3), entry(1, 1), entry(1, 4))
	es, first, ok := ts.ReplayAfter("g", 0, 0, 0)
	if want := []Pos{{1, 1}, {1, 2}, {1, 3}, {1, 4}}; !ok || first != (Pos{1, 1}) || !slices.Equal(positions(es), want) {
		t.Fatalf("ReplayAfter = %v first %v ok %v; want %v", positions(es), first, ok, want)
	}
	if string(es[1].Data) != "m1.2" {
		t.Fatalf("a repeat replaced the entry: %q", es[1].Data)
	}
	if !es[0].At.Equal(ts.clock.Now()) {
		t.Fatalf("At = %v, want the clock's %v", es[0].At, ts.clock.Now())
	}
	if last, ok := ts.ReplayLast("g"); !ok || last != (Pos{1, 4}) {
		t.Fatalf("ReplayLast = %v, %v", last, ok)
	}
	if st := ts.Stats(); st.ReplayAppended != 4 || st.ReplayEntries != 4 || st.ReplayGroups != 1 ||
		st.ReplayBytes != 4*ReplaySizeForTest("g", 4) {
		t.Fatalf("stats = %+v", st)
	}
	for _, tc := range []struct {
		name  string
		group string
		e     Entry
	}{
		{"empty group", "", entry(1, 5)},
		{"long group", string(make([]byte, 257)), entry(1, 5)},
		{"position zero", "h", entry(0, 0)},
	} {
		if err := ts.AppendReplay(tc.group, tc.e); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: AppendReplay = %v, want ErrInvalid", tc.name, err)
		}
	}
}

func TestReplayAfterAcrossEpochs(t *testing.T) {
	ts := openTest(t, Limits{})
	ts.mustAppend(t, "g", entry(1, 1), entry(1, 2), entry(1, 3), entry(2, 1), entry(2, 2))
	ts.mustAppend(t, "other", entry(1, 1))
	for _, tc := range []struct {
		name       string
		epoch, seq uint64
		limit      int
		want       []Pos
	}{
		{"from the start", 0, 0, 0, []Pos{{1, 1}, {1, 2}, {1, 3}, {2, 1}, {2, 2}}},
		{"across the epoch change", 1, 2, 0, []Pos{{1, 3}, {2, 1}, {2, 2}}},
		{"end of an epoch", 1, 3, 1, []Pos{{2, 1}}},
		{"a position not held", 1, 9, 0, []Pos{{2, 1}, {2, 2}}},
		{"limited", 0, 0, 2, []Pos{{1, 1}, {1, 2}}},
		{"caught up", 2, 2, 0, nil},
		{"ahead", 3, 0, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es, first, ok := ts.ReplayAfter("g", tc.epoch, tc.seq, tc.limit)
			if !ok || first != (Pos{1, 1}) || !slices.Equal(positions(es), tc.want) {
				t.Fatalf("ReplayAfter(%d, %d, %d) = %v first %v ok %v; want %v",
					tc.epoch, tc.seq, tc.limit, positions(es), first, ok, tc.want)
			}
		})
	}
}

func TestReplayTrimPerGroup(t *testing.T) {
	size := ReplaySizeForTest("g", 4) // every entry(1, n<10) is 4 bytes of data
	for _, tc := range []struct {
		name string
		q    Quota
	}{
		{"count", Quota{Count: 3}},
		{"bytes", Quota{Bytes: 3*size + size/2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := openTest(t, Limits{ReplayPerGroup: tc.q})
			ts.mustAppend(t, "g", entry(1, 1), entry(1, 2), entry(1, 3), entry(1, 4))
			ts.mustAppend(t, "g", entry(1, 5))
			ts.mustAppend(t, "h", entry(1, 1))
			es, first, _ := ts.ReplayAfter("g", 0, 0, 0)
			if want := []Pos{{1, 3}, {1, 4}, {1, 5}}; !slices.Equal(positions(es), want) || first != (Pos{1, 3}) {
				t.Fatalf("after trim: %v first %v; want %v first (1,3)", positions(es), first, want)
			}
			// The trimmed position is before first: a member asking
			// from there learns what it missed.
			if es, first, _ := ts.ReplayAfter("g", 1, 1, 0); len(es) != 3 || first != (Pos{1, 3}) {
				t.Fatalf("ReplayAfter(1,1) = %v first %v", positions(es), first)
			}
			st := ts.Stats()
			if st.ReplayTrimmed != 2 || st.ReplayEntries != 4 || st.ReplayBytes != 4*size || st.Bytes != 4*size {
				t.Fatalf("stats = %+v", st)
			}
			// Trimmed entries are deleted on disk too.
			ts.reopen(t)
			if es, _, _ := ts.ReplayAfter("g", 0, 0, 0); !slices.Equal(positions(es), []Pos{{1, 3}, {1, 4}, {1, 5}}) {
				t.Fatalf("after reopen: %v", positions(es))
			}
		})
	}
}

func TestReplayTrimTotal(t *testing.T) {
	size := ReplaySizeForTest("a", 4)
	ts := openTest(t, Limits{ReplayTotalBytes: 4 * size})
	ts.mustAppend(t, "a", entry(1, 1), entry(1, 2))
	ts.clock.Advance(time.Second)
	ts.mustAppend(t, "b", entry(1, 1), entry(1, 2))
	ts.clock.Advance(time.Second)
	ts.mustAppend(t, "c", entry(1, 1))
	// The oldest head across groups went: a's (1,1).
	if _, first, _ := ts.ReplayAfter("a", 0, 0, 0); first != (Pos{1, 2}) {
		t.Fatalf("a's first = %v, want (1,2)", first)
	}
	ts.mustAppend(t, "c", entry(1, 2), entry(1, 3))
	// Then a's (1,2) (a's log is gone), then b's (1,1).
	if _, _, ok := ts.ReplayAfter("a", 0, 0, 0); ok {
		t.Fatal("group a still holds entries")
	}
	if _, first, _ := ts.ReplayAfter("b", 0, 0, 0); first != (Pos{1, 2}) {
		t.Fatalf("b's first = %v, want (1,2)", first)
	}
	if es, first, _ := ts.ReplayAfter("c", 0, 0, 0); len(es) != 3 || first != (Pos{1, 1}) {
		t.Fatalf("c = %v first %v", positions(es), first)
	}
	st := ts.Stats()
	if st.ReplayTrimmed != 3 || st.ReplayEntries != 4 || st.ReplayGroups != 2 || st.ReplayBytes > 4*size {
		t.Fatalf("stats = %+v", st)
	}
}

func TestReplayMaxBytes(t *testing.T) {
	size := ReplaySizeForTest("g", 4)
	o := Offline{Recipient: "bob", Sender: "amy", ID: []byte("id-1"), Data: []byte("data 1 from amy")}
	osize := OfflineSizeForTest(o)
	ts := openTest(t, Limits{MaxBytes: 3 * size})
	ts.mustAppend(t, "g", entry(1, 1), entry(1, 2), entry(1, 3))
	// An offline message does not trim replay entries: it is refused.
	if _, err := ts.PutOffline(ts.msg("bob", "amy", 1)); !errors.Is(err, ErrFull) {
		t.Fatalf("PutOffline = %v, want ErrFull", err)
	}
	ts.mustAppend(t, "g", entry(1, 4)) // trims (1,1) to make room
	if _, first, _ := ts.ReplayAfter("g", 0, 0, 0); first != (Pos{1, 2}) {
		t.Fatalf("first = %v, want (1,2)", first)
	}
	if st := ts.Stats(); st.Bytes != 3*size || st.ReplayTrimmed != 1 {
		t.Fatalf("stats = %+v", st)
	}
	// With offline messages filling the store, replay has no room.
	ts2 := openTest(t, Limits{MaxBytes: osize + size/2})
	ts2.mustPut(t, ts2.msg("bob", "amy", 1))
	if err := ts2.AppendReplay("g", entry(1, 1)); !errors.Is(err, ErrFull) {
		t.Fatalf("AppendReplay with no room = %v, want ErrFull", err)
	}
}

// onDisk reads group's replay positions from the file through the open
// store's database.
func onDisk(t *testing.T, s *Store, group string) []Pos {
	t.Helper()
	var out []Pos
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketReplay).ForEach(func(k, _ []byte) error {
			if g, e, q, ok := parseReplayKey(k); ok && g == group {
				out = append(out, Pos{e, q})
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestReplayFlusherWrites(t *testing.T) {
	flushed := make(chan int, 16)
	ts := openTest(t, Limits{}, WithFlushInterval(time.Millisecond),
		WithFlushHookForTest(func(n int, err error) {
			if err != nil {
				t.Errorf("flush: %v", err)
			}
			flushed <- n
		}))
	ts.mustAppend(t, "g", entry(1, 1), entry(1, 2))
	select {
	case n := <-flushed:
		if n != 2 {
			t.Fatalf("flushed %d keys, want 2 in one transaction", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no flush within 10s")
	}
	if got := onDisk(t, ts.Store, "g"); !slices.Equal(got, []Pos{{1, 1}, {1, 2}}) {
		t.Fatalf("on disk after the flush: %v", got)
	}
}

func TestCloseFlushes(t *testing.T) {
	// The flusher would wait an hour: only Close writes.
	ts := openTest(t, Limits{ReplayPerGroup: Quota{Count: 2}}, WithFlushInterval(time.Hour))
	ts.mustAppend(t, "g", entry(1, 1), entry(1, 2))
	if err := ts.Flush(); err != nil {
		t.Fatal(err)
	}
	ts.mustAppend(t, "g", entry(1, 3), entry(2, 1)) // trims (1,1) and (1,2)
	if got := onDisk(t, ts.Store, "g"); !slices.Equal(got, []Pos{{1, 1}, {1, 2}}) {
		t.Fatalf("on disk before Close: %v (the flusher ran?)", got)
	}
	ts.reopen(t)
	es, first, ok := ts.ReplayAfter("g", 0, 0, 0)
	if !ok || first != (Pos{1, 3}) || !slices.Equal(positions(es), []Pos{{1, 3}, {2, 1}}) {
		t.Fatalf("after reopen: %v first %v ok %v", positions(es), first, ok)
	}
	if got := onDisk(t, ts.Store, "g"); !slices.Equal(got, []Pos{{1, 3}, {2, 1}}) {
		t.Fatalf("on disk after reopen: %v", got)
	}
}

func TestReplayIgnoresAged(t *testing.T) {
	ts := openTest(t, Limits{ReplayMaxAge: time.Minute})
	old := entry(1, 1)
	old.At = ts.clock.Now().Add(-2 * time.Minute)
	ts.mustAppend(t, "g", old, entry(1, 2))
	if es, _, _ := ts.ReplayAfter("g", 0, 0, 0); !slices.Equal(positions(es), []Pos{{1, 2}}) {
		t.Fatalf("ReplayAfter = %v, want only (1,2)", positions(es))
	}
}

// TestReplayTrimOldestAcrossManyGroups appends to many groups in a shuffled
// order and checks after every append that the total trim dropped exactly
// the oldest entries, then that Expire drops exactly those past the age.
func TestReplayTrimOldestAcrossManyGroups(t *testing.T) {
	const groups, appends, keep = 40, 600, 100
	size := ReplaySizeForTest("g00", 4)
	ts := openTest(t, Limits{ReplayTotalBytes: keep * size, ReplayMaxAge: time.Hour})
	rng := rand.New(rand.NewPCG(1, 2))
	seq := make([]uint64, groups)
	type rec struct {
		group string
		pos   Pos
		at    time.Time
	}
	var all []rec
	for i := range appends {
		ts.clock.Advance(time.Millisecond)
		g := rng.IntN(groups)
		seq[g]++
		name := fmt.Sprintf("g%02d", g)
		ts.mustAppend(t, name, Entry{Epoch: 1, Seq: seq[g], Data: []byte("abcd")})
		all = append(all, rec{name, Pos{1, seq[g]}, ts.clock.Now()})
		held := 0
		for g := range groups {
			es, _, _ := ts.ReplayAfter(fmt.Sprintf("g%02d", g), 0, 0, 0)
			held += len(es)
		}
		if want := min(i+1, keep); held != want {
			t.Fatalf("after %d appends %d entries held, want %d", i+1, held, want)
		}
	}
	// Held are exactly the newest keep appends.
	check := func(from int) {
		t.Helper()
		for i, r := range all {
			es, _, _ := ts.ReplayAfter(r.group, 0, 0, 0)
			if got := slices.Contains(positions(es), r.pos); got != (i >= from) {
				t.Fatalf("append %d (%s %v at %v): held %v, want %v", i, r.group, r.pos, r.at, got, i >= from)
			}
		}
	}
	check(appends - keep)
	if st := ts.Stats(); st.ReplayTrimmed != appends-keep {
		t.Fatalf("ReplayTrimmed = %d, want %d", st.ReplayTrimmed, appends-keep)
	}
	// Age out all but the newest 30: they were appended 1ms apart.
	ts.clock.Advance(time.Hour - 30*time.Millisecond + time.Millisecond/2)
	if _, n, _ := ts.Expire(); n != keep-30 {
		t.Fatalf("Expire removed %d, want %d", n, keep-30)
	}
	check(appends - 30)
}
