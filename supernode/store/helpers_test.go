package store

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// clock is a settable clock for tests.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// testStore is a store under test with its path and clock.
type testStore struct {
	*Store
	path  string
	clock *clock
	lim   Limits
	opts  []Option
}

// openTest opens a store in a fresh temporary directory; it is closed when
// the test ends (if the test has not closed it).
func openTest(t testing.TB, lim Limits, opts ...Option) *testStore {
	t.Helper()
	ts := &testStore{path: filepath.Join(t.TempDir(), "store.db"), clock: newClock(), lim: lim}
	ts.opts = append([]Option{WithClock(ts.clock.Now)}, opts...)
	ts.open(t)
	return ts
}

func (ts *testStore) open(t testing.TB) {
	t.Helper()
	s, err := Open(ts.path, ts.lim, ts.opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	ts.Store = s
	t.Cleanup(func() { _ = s.Close() })
}

// reopen closes the store and opens the same file again.
func (ts *testStore) reopen(t testing.TB) {
	t.Helper()
	if err := ts.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ts.open(t)
}

// msg is an offline message from sender to recipient with id n, expiring
// in an hour.
func (ts *testStore) msg(recipient, sender string, n int) Offline {
	return Offline{
		Recipient: recipient,
		Sender:    sender,
		ID:        []byte(fmt.Sprintf("id-%d", n)),
		Data:      []byte(fmt.Sprintf("data %d from %s", n, sender)),
		Expires:   ts.clock.Now().Add(time.Hour),
	}
}

func (ts *testStore) mustPut(t testing.TB, o Offline) {
	t.Helper()
	ok, err := ts.PutOffline(o)
	if err != nil || !ok {
		t.Fatalf("PutOffline(%s): %v, %v", o.ID, ok, err)
	}
}

func (ts *testStore) mustAppend(t testing.TB, group string, es ...Entry) {
	t.Helper()
	if err := ts.AppendReplay(group, es...); err != nil {
		t.Fatalf("AppendReplay(%s): %v", group, err)
	}
}

// ids lists the ids of msgs as strings.
func ids(msgs []Offline) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, string(m.ID))
	}
	return out
}

// positions lists the positions of es.
func positions(es []Entry) []Pos {
	var out []Pos
	for _, e := range es {
		out = append(out, Pos{e.Epoch, e.Seq})
	}
	return out
}

// entry is a replay entry with a small payload.
func entry(epoch, seq uint64) Entry {
	return Entry{Epoch: epoch, Seq: seq, Data: []byte(fmt.Sprintf("m%d.%d", epoch, seq))}
}

// limits is the store's effective limits, defaults filled in.
func (ts *testStore) limits() Limits { return ts.Store.lim }
