package store

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestOfflineRoundTrip(t *testing.T) {
	ts := openTest(t, Limits{})
	// Put order, not sender or id order, is the listing order.
	ts.mustPut(t, ts.msg("bob", "zed", 3))
	ts.mustPut(t, ts.msg("bob", "amy", 1))
	ts.mustPut(t, ts.msg("bob", "amy", 2))
	ts.mustPut(t, ts.msg("carol", "amy", 9))

	got, err := ts.Offline("bob", 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"id-3", "id-1", "id-2"}; !slices.Equal(ids(got), want) {
		t.Fatalf("Offline(bob) = %v, want %v", ids(got), want)
	}
	want := ts.msg("bob", "zed", 3)
	if g := got[0]; g.Recipient != "bob" || g.Sender != "zed" || !bytes.Equal(g.Data, want.Data) || !g.Expires.Equal(want.Expires) {
		t.Fatalf("Offline(bob)[0] = %+v, want %+v", g, want)
	}
	if got, _ := ts.Offline("bob", 2); !slices.Equal(ids(got), []string{"id-3", "id-1"}) {
		t.Fatalf("Offline(bob, 2) = %v", ids(got))
	}
	if n := ts.OfflineCount("bob"); n != 3 {
		t.Fatalf("OfflineCount(bob) = %d, want 3", n)
	}

	if ok, err := ts.DeleteOffline("bob", "amy", []byte("id-1")); !ok || err != nil {
		t.Fatalf("DeleteOffline = %v, %v; want true", ok, err)
	}
	if ok, err := ts.DeleteOffline("bob", "amy", []byte("id-1")); ok || err != nil {
		t.Fatalf("second DeleteOffline = %v, %v; want false", ok, err)
	}
	if ok, _ := ts.DeleteOffline("bob", "zed", []byte("id-9")); ok {
		t.Fatal("DeleteOffline of another recipient's message reported true")
	}
	got, _ = ts.Offline("bob", 0)
	if want := []string{"id-3", "id-2"}; !slices.Equal(ids(got), want) {
		t.Fatalf("after delete Offline(bob) = %v, want %v", ids(got), want)
	}
	st := ts.Stats()
	if st.OfflineMessages != 3 || st.OfflineRecipients != 2 || st.OfflineStored != 4 || st.OfflineDeleted != 1 {
		t.Fatalf("Stats = %+v", st)
	}
	var size int64
	for _, o := range []Offline{ts.msg("bob", "zed", 3), ts.msg("bob", "amy", 2), ts.msg("carol", "amy", 9)} {
		size += OfflineSizeForTest(o)
	}
	if st.OfflineBytes != size || st.Bytes != size {
		t.Fatalf("Stats bytes = %d / %d, want %d", st.OfflineBytes, st.Bytes, size)
	}
}

func TestPutOfflineIdempotent(t *testing.T) {
	ts := openTest(t, Limits{OfflinePerRecipient: Quota{Count: 1}})
	o := ts.msg("bob", "amy", 1)
	ts.mustPut(t, o)
	before := ts.Stats()
	// Same (recipient, sender, id), even with other data: not stored, not
	// charged, and not refused although the recipient's quota is full.
	o.Data = []byte("other")
	if ok, err := ts.PutOffline(o); ok || err != nil {
		t.Fatalf("repeat PutOffline = %v, %v; want false, nil", ok, err)
	}
	if after := ts.Stats(); after != before {
		t.Fatalf("repeat changed stats: %+v -> %+v", before, after)
	}
	if got, _ := ts.Offline("bob", 0); len(got) != 1 || string(got[0].Data) == "other" {
		t.Fatalf("Offline after repeat = %+v", got)
	}
}

func TestPutOfflineInvalid(t *testing.T) {
	ts := openTest(t, Limits{})
	now := ts.clock.Now()
	ok := ts.msg("bob", "amy", 1)
	for _, tc := range []struct {
		name string
		edit func(*Offline)
	}{
		{"no recipient", func(o *Offline) { o.Recipient = "" }},
		{"no sender", func(o *Offline) { o.Sender = "" }},
		{"long recipient", func(o *Offline) { o.Recipient = strings.Repeat("r", 257) }},
		{"no id", func(o *Offline) { o.ID = nil }},
		{"long id", func(o *Offline) { o.ID = make([]byte, 65) }},
		{"no data", func(o *Offline) { o.Data = nil }},
		{"expires now", func(o *Offline) { o.Expires = now }},
		{"expired", func(o *Offline) { o.Expires = now.Add(-time.Second) }},
		{"zero expiry", func(o *Offline) { o.Expires = time.Time{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.edit(&o)
			if stored, err := ts.PutOffline(o); stored || !errors.Is(err, ErrInvalid) {
				t.Fatalf("PutOffline = %v, %v; want ErrInvalid", stored, err)
			}
		})
	}
	if st := ts.Stats(); st.OfflineMessages != 0 || st.Bytes != 0 {
		t.Fatalf("invalid puts were stored: %+v", st)
	}
}

func TestOfflineQuotas(t *testing.T) {
	one := OfflineSizeForTest(Offline{Recipient: "bob", Sender: "amy", ID: []byte("id-1"), Data: []byte("data 1 from amy")})
	for _, tc := range []struct {
		name string
		lim  Limits
		fill []Offline // stored first
		try  Offline   // then refused
		is   error
		text string
	}{
		{
			name: "recipient count",
			lim:  Limits{OfflinePerRecipient: Quota{Count: 2}},
			fill: []Offline{{Recipient: "bob", Sender: "amy"}, {Recipient: "bob", Sender: "cat"}},
			try:  Offline{Recipient: "bob", Sender: "dan"},
			is:   ErrOverQuota, text: "store: over quota: recipient holds 2 messages (limit 2)",
		},
		{
			name: "recipient bytes",
			lim:  Limits{OfflinePerRecipient: Quota{Bytes: 2*one + one/2}},
			fill: []Offline{{Recipient: "bob", Sender: "amy"}, {Recipient: "bob", Sender: "cat"}},
			try:  Offline{Recipient: "bob", Sender: "dan"},
			is:   ErrOverQuota, text: "recipient holds",
		},
		{
			name: "sender count",
			lim:  Limits{OfflinePerSender: Quota{Count: 2}},
			fill: []Offline{{Recipient: "bob", Sender: "amy"}, {Recipient: "cat", Sender: "amy"}},
			try:  Offline{Recipient: "dan", Sender: "amy"},
			is:   ErrOverQuota, text: "store: over quota: sender holds 2 messages (limit 2)",
		},
		{
			name: "sender bytes",
			lim:  Limits{OfflinePerSender: Quota{Bytes: 2*one + one/2}},
			fill: []Offline{{Recipient: "bob", Sender: "amy"}, {Recipient: "cat", Sender: "amy"}},
			try:  Offline{Recipient: "dan", Sender: "amy"},
			is:   ErrOverQuota, text: "sender holds",
		},
		{
			name: "max bytes",
			lim:  Limits{MaxBytes: 2*one + one/2},
			fill: []Offline{{Recipient: "bob", Sender: "amy"}, {Recipient: "cat", Sender: "dan"}},
			try:  Offline{Recipient: "eve", Sender: "fay"},
			is:   ErrFull, text: "store: full: store holds",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := openTest(t, tc.lim)
			for i, f := range tc.fill {
				ts.mustPut(t, ts.msg(f.Recipient, f.Sender, i+1))
			}
			try := ts.msg(tc.try.Recipient, tc.try.Sender, 1)
			before := ts.Stats()
			listed, _ := ts.Offline(try.Recipient, 0)
			ok, err := ts.PutOffline(try)
			if ok || !errors.Is(err, tc.is) {
				t.Fatalf("PutOffline = %v, %v; want %v", ok, err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("error %q does not name the quota (%q)", err, tc.text)
			}
			after := ts.Stats()
			if after.OfflineRefused != before.OfflineRefused+1 {
				t.Fatalf("OfflineRefused = %d, want %d", after.OfflineRefused, before.OfflineRefused+1)
			}
			after.OfflineRefused = before.OfflineRefused
			if after != before {
				t.Fatalf("refused put changed the store: %+v -> %+v", before, after)
			}
			// Nothing on disk either, and the quota still holds after a
			// restart rebuilt the counters.
			ts.reopen(t)
			if got, _ := ts.Offline(try.Recipient, 0); !slices.Equal(ids(got), ids(listed)) {
				t.Fatalf("after the refusal Offline(%s) = %v, was %v", try.Recipient, ids(got), ids(listed))
			}
			if st := ts.Stats(); st.OfflineMessages != len(tc.fill) || st.Bytes != before.Bytes {
				t.Fatalf("after reopen stats = %+v, want %d messages, %d bytes", st, len(tc.fill), before.Bytes)
			}
			if _, err := ts.PutOffline(try); !errors.Is(err, tc.is) {
				t.Fatalf("after reopen PutOffline = %v, want %v", err, tc.is)
			}
		})
	}
}

func TestOfflineReopen(t *testing.T) {
	ts := openTest(t, Limits{OfflinePerRecipient: Quota{Count: 3}})
	ts.mustPut(t, ts.msg("bob", "zed", 5))
	ts.mustPut(t, ts.msg("bob", "amy", 1))
	ts.mustPut(t, ts.msg("carol", "amy", 2))
	ts.mustAppend(t, "g", entry(1, 1), entry(1, 2), entry(2, 1))
	before := ts.Stats()

	ts.reopen(t)
	got, err := ts.Offline("bob", 0)
	if err != nil || !slices.Equal(ids(got), []string{"id-5", "id-1"}) {
		t.Fatalf("after reopen Offline(bob) = %v, %v", ids(got), err)
	}
	// A put after the restart sorts after the earlier ones.
	ts.mustPut(t, ts.msg("bob", "amy", 0))
	got, _ = ts.Offline("bob", 0)
	if want := []string{"id-5", "id-1", "id-0"}; !slices.Equal(ids(got), want) {
		t.Fatalf("Offline(bob) = %v, want %v", ids(got), want)
	}
	// The counters were rebuilt: bob's quota of 3 is full.
	if _, err := ts.PutOffline(ts.msg("bob", "dan", 7)); !errors.Is(err, ErrOverQuota) {
		t.Fatalf("PutOffline past the quota after reopen = %v, want ErrOverQuota", err)
	}
	if ok, _ := ts.PutOffline(ts.msg("bob", "zed", 5)); ok {
		t.Fatal("a repeat after reopen was stored again")
	}
	es, first, ok := ts.ReplayAfter("g", 0, 0, 0)
	if want := []Pos{{1, 1}, {1, 2}, {2, 1}}; !ok || first != (Pos{1, 1}) || !slices.Equal(positions(es), want) {
		t.Fatalf("ReplayAfter after reopen = %v, %v, %v", positions(es), first, ok)
	}
	if string(es[2].Data) != "m2.1" || !es[2].At.Equal(ts.clock.Now()) {
		t.Fatalf("entry after reopen = %+v", es[2])
	}
	st := ts.Stats()
	if st.OfflineMessages != 4 || st.OfflineRecipients != 2 || st.ReplayEntries != 3 || st.ReplayGroups != 1 ||
		st.ReplayBytes != before.ReplayBytes || st.OfflineBytes != before.OfflineBytes+OfflineSizeForTest(ts.msg("bob", "amy", 0)) {
		t.Fatalf("stats after reopen = %+v (before %+v)", st, before)
	}
}

func TestExpire(t *testing.T) {
	ts := openTest(t, Limits{ReplayMaxAge: 10 * time.Minute})
	start := ts.clock.Now()
	short := ts.msg("bob", "amy", 1)
	short.Expires = start.Add(time.Minute)
	ts.mustPut(t, short)
	ts.mustPut(t, ts.msg("bob", "amy", 2)) // an hour
	ts.mustAppend(t, "g", entry(1, 1), entry(1, 2))
	ts.clock.Advance(5 * time.Minute)
	ts.mustAppend(t, "g", entry(1, 3))

	// Expired messages are not listed even before Expire removes them.
	if got, _ := ts.Offline("bob", 0); !slices.Equal(ids(got), []string{"id-2"}) {
		t.Fatalf("Offline(bob) = %v, want only id-2", ids(got))
	}
	ts.clock.Advance(5*time.Minute + time.Second) // 10m1s after start
	off, rep, err := ts.Expire()
	if err != nil || off != 1 || rep != 2 {
		t.Fatalf("Expire = %d, %d, %v; want 1, 2", off, rep, err)
	}
	if n := ts.OfflineCount("bob"); n != 1 {
		t.Fatalf("OfflineCount = %d, want 1", n)
	}
	if es, first, _ := ts.ReplayAfter("g", 0, 0, 0); !slices.Equal(positions(es), []Pos{{1, 3}}) || first != (Pos{1, 3}) {
		t.Fatalf("ReplayAfter after Expire = %v, first %v", positions(es), first)
	}
	st := ts.Stats()
	if st.OfflineExpired != 1 || st.ReplayExpired != 2 || st.OfflineMessages != 1 || st.ReplayEntries != 1 {
		t.Fatalf("stats = %+v", st)
	}
	if off, rep, _ := ts.Expire(); off != 0 || rep != 0 {
		t.Fatalf("second Expire = %d, %d", off, rep)
	}
	// The removals reached the disk.
	ts.reopen(t)
	if st := ts.Stats(); st.OfflineMessages != 1 || st.ReplayEntries != 1 || st.Bytes != st.OfflineBytes+st.ReplayBytes {
		t.Fatalf("after reopen stats = %+v", st)
	}
}
