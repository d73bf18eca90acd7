package directory

import (
	"crypto/rand"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/protocol"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func newID(tb testing.TB) peer.ID {
	tb.Helper()
	_, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

func ann(id peer.ID, seq uint64) protocol.Announcement {
	return protocol.Announcement{
		ID:       id,
		Addrs:    []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/4101")},
		Role:     protocol.RoleSupernode,
		Capacity: 10,
		Version:  protocol.Version,
		Seq:      seq,
		Interval: time.Second,
	}
}

func TestApply(t *testing.T) {
	a, b := newID(t), newID(t)
	type step struct {
		signer peer.ID
		a      protocol.Announcement
		at     time.Duration
		want   EventKind
		reason protocol.Reason
	}
	departing := func(x protocol.Announcement) protocol.Announcement { x.Departing = true; return x }
	tests := []struct {
		name    string
		steps   []step
		wantLen int
	}{
		{"add then update", []step{
			{a, ann(a, 1), 0, Added, ""},
			{a, ann(a, 2), time.Second, Updated, ""},
		}, 1},
		{"signer mismatch", []step{
			{b, ann(a, 1), 0, 0, protocol.ReasonSignerMismatch},
		}, 0},
		{"replayed seq", []step{
			{a, ann(a, 5), 0, Added, ""},
			{a, ann(a, 5), 0, 0, protocol.ReasonStaleSeq},
			{a, ann(a, 4), 0, 0, protocol.ReasonStaleSeq},
		}, 1},
		{"departure removes at once", []step{
			{a, ann(a, 1), 0, Added, ""},
			{b, ann(b, 1), 0, Added, ""},
			{a, departing(ann(a, 2)), time.Millisecond, Departed, ""},
		}, 1},
		{"old announcement cannot resurrect a departed peer", []step{
			{a, ann(a, 1), 0, Added, ""},
			{a, departing(ann(a, 3)), 0, Departed, ""},
			{a, ann(a, 2), time.Second, 0, protocol.ReasonStaleSeq},
		}, 0},
		{"restart with a newer seq returns", []step{
			{a, ann(a, 1), 0, Added, ""},
			{a, departing(ann(a, 2)), 0, Departed, ""},
			{a, ann(a, 100), time.Second, Added, ""},
		}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := New()
			for i, s := range tt.steps {
				ev, err := d.Apply(s.signer, s.a, t0.Add(s.at))
				if got := protocol.ReasonOf(err); got != s.reason {
					t.Fatalf("step %d: reason %q (err %v), want %q", i, got, err, s.reason)
				}
				if ev.Kind != s.want {
					t.Fatalf("step %d: event %v, want %v", i, ev.Kind, s.want)
				}
			}
			if n := d.Snapshot().Len(); n != tt.wantLen {
				t.Fatalf("len = %d, want %d", n, tt.wantLen)
			}
		})
	}
}

func TestReceiveRejectsUndecodable(t *testing.T) {
	d := New()
	_, err := d.Receive(newID(t), make([]byte, 64<<10), nil, t0)
	if protocol.ReasonOf(err) != protocol.ReasonOversize {
		t.Fatalf("64 KiB: err = %v, want oversize", err)
	}
	_, err = d.Receive(newID(t), []byte{0xff}, nil, t0)
	if protocol.ReasonOf(err) != protocol.ReasonUndecodable {
		t.Fatalf("garbage: err = %v, want undecodable", err)
	}
}

func TestExpireAfterMissedIntervals(t *testing.T) {
	d := New()
	a, b := newID(t), newID(t)
	if _, err := d.Apply(a, ann(a, 1), t0); err != nil {
		t.Fatal(err)
	}
	slow := ann(b, 1)
	slow.Interval = 10 * time.Second
	if _, err := d.Apply(b, slow, t0); err != nil {
		t.Fatal(err)
	}
	ttl := protocol.MissedAnnouncements * time.Second
	if evs := d.Expire(t0.Add(ttl - time.Millisecond)); len(evs) != 0 {
		t.Fatalf("expired early: %v", evs)
	}
	evs := d.Expire(t0.Add(ttl))
	if len(evs) != 1 || evs[0].ID != a || evs[0].Kind != Expired {
		t.Fatalf("Expire = %v, want a expired", evs)
	}
	if _, ok := d.Snapshot().Get(b); !ok {
		t.Fatal("b, with a 10 s interval, expired with a's 1 s interval")
	}
	// A fresh announcement keeps an entry alive.
	if _, err := d.Apply(b, func() protocol.Announcement { x := slow; x.Seq = 2; return x }(), t0.Add(25*time.Second)); err != nil {
		t.Fatal(err)
	}
	if evs := d.Expire(t0.Add(50 * time.Second)); len(evs) != 0 {
		t.Fatalf("refreshed entry expired: %v", evs)
	}
}

func TestSnapshotVersions(t *testing.T) {
	d := New()
	a, b := newID(t), newID(t)
	s0 := d.Snapshot()
	mustApply(t, d, a, ann(a, 1))
	mustApply(t, d, b, ann(b, 1))
	s1 := d.Snapshot()
	if s1.Len() != 2 || s1.Membership <= s0.Membership || s1.Version <= s0.Version {
		t.Fatalf("after adds: %+v", s1)
	}
	if string(s1.Entries[0].ID) > string(s1.Entries[1].ID) {
		t.Fatal("snapshot not sorted by ID")
	}
	loadOnly := ann(a, 2)
	loadOnly.Load = 5
	mustApply(t, d, a, loadOnly)
	s2 := d.Snapshot()
	if s2.Membership != s1.Membership || s2.Version <= s1.Version {
		t.Fatalf("load update: membership %d→%d version %d→%d", s1.Membership, s2.Membership, s1.Version, s2.Version)
	}
	if e, _ := s2.Get(a); e.Load != 5 || !e.FirstSeen.Equal(t0) {
		t.Fatalf("entry after update: %+v", e)
	}
	capChange := ann(a, 3)
	capChange.Capacity = 99
	mustApply(t, d, a, capChange)
	if s3 := d.Snapshot(); s3.Membership <= s2.Membership {
		t.Fatal("capacity change did not bump membership")
	}
	if s1.Len() != 2 {
		t.Fatal("an old snapshot changed")
	}
	if a, b := d.Snapshot(), d.Snapshot(); a != b {
		t.Fatal("unchanged directory rebuilt its snapshot")
	}
}

func TestSubscribeCoalesces(t *testing.T) {
	d := New()
	ch, cancel := d.Subscribe()
	for i := range 5 {
		id := newID(t)
		mustApply(t, d, id, ann(id, uint64(i+1)))
	}
	select {
	case <-ch:
	default:
		t.Fatal("no notification")
	}
	select {
	case <-ch:
		t.Fatal("five changes gave more than one pending notification")
	default:
	}
	cancel()
	cancel()
	id := newID(t)
	mustApply(t, d, id, ann(id, 1))
	select {
	case <-ch:
		t.Fatal("notified after cancel")
	default:
	}
}

func TestMaxEntries(t *testing.T) {
	d := New(WithMaxEntries(2))
	for range 2 {
		id := newID(t)
		mustApply(t, d, id, ann(id, 1))
	}
	id := newID(t)
	if _, err := d.Apply(id, ann(id, 1), t0); protocol.ReasonOf(err) != protocol.ReasonDirectoryFull {
		t.Fatalf("third peer: err = %v, want directory_full", err)
	}
	// Once the others expired and their marks are forgotten, there is room.
	d.Expire(t0.Add(time.Hour))
	if _, err := d.Apply(id, ann(id, 1), t0.Add(time.Hour)); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
}

func TestConcurrentReaders(t *testing.T) {
	d := New()
	ids := make([]peer.ID, 8)
	for i := range ids {
		ids[i] = newID(t)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := d.Snapshot()
				for _, e := range s.Entries {
					if e.Capacity == 0 {
						t.Error("torn entry")
					}
				}
			}
		})
	}
	for seq := uint64(1); seq <= 200; seq++ {
		id := ids[seq%uint64(len(ids))]
		if _, err := d.Apply(id, ann(id, seq), t0); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if d.Snapshot().Len() != len(ids) {
		t.Fatalf("len = %d", d.Snapshot().Len())
	}
}

func mustApply(tb testing.TB, d *Directory, signer peer.ID, a protocol.Announcement) {
	tb.Helper()
	if _, err := d.Apply(signer, a, t0); err != nil {
		tb.Fatal(err)
	}
}

func TestMegaAnnouncements(t *testing.T) {
	op, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	trusted := []crypto.PubKey{op.GetPublic()}
	verify := func(a protocol.Announcement, now time.Time) (protocol.MegaCert, error) {
		return protocol.VerifyMegaCert(a.MegaCert, trusted, a.ID, now, nil)
	}
	mega := newID(t)
	cert, err := protocol.SealMegaCert(protocol.MegaCert{Subject: mega, Capacity: 500, NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(time.Second - protocol.ClockSkew), Serial: 11}, op)
	if err != nil {
		t.Fatal(err)
	}
	a := ann(mega, 1)
	a.Role, a.MegaCert = protocol.RoleMega, cert

	if _, err := New().Apply(mega, a, t0); protocol.ReasonOf(err) != protocol.CertUntrusted {
		t.Fatalf("without trusted keys: %v", err)
	}
	d := New(WithMegaVerifier(verify))
	if _, err := d.Apply(mega, a, t0); err != nil {
		t.Fatal(err)
	}
	e, _ := d.Snapshot().Get(mega)
	if e.Cert == nil || e.Cert.Serial != 11 {
		t.Fatalf("entry cert %+v", e.Cert)
	}
	if want := t0.Add(time.Second); !e.Expires.Equal(want) {
		t.Fatalf("expires %v, want the certificate's end %v", e.Expires, want)
	}
	// Another peer presenting the certificate is refused.
	thief := newID(t)
	b := a
	b.ID, b.Seq = thief, 1
	if _, err := d.Apply(thief, b, t0); protocol.ReasonOf(err) != protocol.CertWrongSubject {
		t.Fatalf("stolen certificate: %v", err)
	}
	if evs := d.Revoke(11); len(evs) != 1 || d.Snapshot().Len() != 0 {
		t.Fatalf("revoke: %v, %d left", evs, d.Snapshot().Len())
	}
}

// TestRetain: Retain drops the entries not kept, as departures; the same
// announcement of a dropped entry is taken again (a later partial view
// names it again), an older one is still stale, and a live entry's seq
// repeated is stale as before.
func TestRetain(t *testing.T) {
	d := New()
	a, b := newID(t), newID(t)
	for _, id := range []peer.ID{a, b} {
		if _, err := d.Apply(id, ann(id, 5), t0); err != nil {
			t.Fatal(err)
		}
	}
	evs := d.Retain(func(p peer.ID) bool { return p == a })
	if len(evs) != 1 || evs[0].ID != b || evs[0].Kind != Departed {
		t.Fatalf("Retain events %v, want b departed", evs)
	}
	if _, ok := d.Snapshot().Get(b); ok {
		t.Fatal("b still held")
	}
	if !d.Verified(b, 5) || d.Verified(b, 6) || !d.Verified(a, 9) || d.Verified(newID(t), 1) {
		t.Fatal("Verified: want b up to seq 5 (retained out), a (held), no stranger")
	}
	if _, err := d.Apply(a, ann(a, 5), t0); protocol.ReasonOf(err) != protocol.ReasonStaleSeq {
		t.Fatalf("a's seq repeated while held: %v, want stale_seq", err)
	}
	if _, err := d.Apply(b, ann(b, 4), t0); protocol.ReasonOf(err) != protocol.ReasonStaleSeq {
		t.Fatalf("b's older seq after Retain: %v, want stale_seq", err)
	}
	if ev, err := d.Apply(b, ann(b, 5), t0); err != nil || ev.Kind != Added {
		t.Fatalf("b's same announcement after Retain: %v, %v; want added", ev, err)
	}
}
