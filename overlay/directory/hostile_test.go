package directory

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/protocol"
)

// TestReplayAfterMarkForgotten: a dead supernode's last announcement,
// replayed once the directory has forgotten its sequence mark, is refused
// as expired; today's code (no issued time) took it back in.
func TestReplayAfterMarkForgotten(t *testing.T) {
	d := New()
	d.SetLimits(DefaultLimits(time.Second))
	id := newID(t)
	a := ann(id, 1)
	a.Issued = t0
	if _, err := d.Apply(id, a, t0); err != nil {
		t.Fatal(err)
	}
	// It dies; the entry expires, then the mark is forgotten.
	later := t0.Add(2*protocol.Validity(a.Interval) + time.Second)
	d.Expire(later)
	if _, known := d.seqs[id]; known {
		t.Fatal("sequence mark still held: the test does not exercise the replay")
	}
	_, err := d.Apply(id, a, later.Add(protocol.ClockSkew))
	if r := protocol.ReasonOf(err); r != protocol.ReasonExpired {
		t.Fatalf("replay after the mark was forgotten: reason %q (err %v), want %q", r, err, protocol.ReasonExpired)
	}
	if d.Snapshot().Len() != 0 {
		t.Fatal("the replay resurrected the entry")
	}
}

// TestAnnouncedIntervalClamped: an announcer claiming the longest interval
// (10 min, 30 min of life) is believed only up to twice the receiver's
// interval, so its entry is gone MissedAnnouncements × 2 intervals after it
// stopped.
func TestAnnouncedIntervalClamped(t *testing.T) {
	d := New()
	local := 500 * time.Millisecond
	d.SetLimits(DefaultLimits(local))
	id := newID(t)
	a := ann(id, 1)
	a.Interval = protocol.MaxAnnounceInterval
	a.Issued = t0
	if _, err := d.Apply(id, a, t0); err != nil {
		t.Fatal(err)
	}
	e, _ := d.Snapshot().Get(id)
	want := t0.Add(protocol.MissedAnnouncements * protocol.MaxIntervalFactor * local)
	if !e.Expires.Equal(want) {
		t.Fatalf("expires %v after issue, want %v", e.Expires.Sub(t0), want.Sub(t0))
	}
	if evs := d.Expire(want); len(evs) != 1 {
		t.Fatalf("entry of a departed attacker still live %v after its last announcement", want.Sub(t0))
	}
}

// TestDelayedCopyBuysNoTime: an entry lives from when its announcement was
// issued, not from when a late copy arrived.
func TestDelayedCopyBuysNoTime(t *testing.T) {
	d := New()
	d.SetLimits(DefaultLimits(time.Second))
	id := newID(t)
	a := ann(id, 1)
	a.Issued = t0
	if _, err := d.Apply(id, a, t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if e, _ := d.Snapshot().Get(id); !e.Expires.Equal(t0.Add(protocol.Validity(time.Second))) {
		t.Fatalf("expires %v after issue, want %v", e.Expires.Sub(t0), protocol.Validity(time.Second))
	}
}

func TestAdmitRateLimits(t *testing.T) {
	iv := time.Second
	for _, tc := range []struct {
		name    string
		run     func(d *Directory, ids []peer.ID) (accepted int)
		want    int
		comment string
	}{
		{"one signer flooding: PerSigner per interval", func(d *Directory, ids []peer.ID) int {
			n := 0
			for i := range 5000 {
				if d.Admit(ids[1], ids[0], t0.Add(time.Duration(i)*time.Microsecond)) == nil {
					n++
				}
			}
			return n
		}, 4, "5,000 messages in 5 ms"},
		{"an honest announcer once per interval is never limited", func(d *Directory, ids []peer.ID) int {
			n := 0
			for i := range 100 {
				if d.Admit(ids[1], ids[0], t0.Add(time.Duration(i)*iv*9/10)) == nil {
					n++
				}
			}
			return n
		}, 100, ""},
		{"one forwarder, many signers: PerForwarder per interval", func(d *Directory, ids []peer.ID) int {
			n := 0
			for i := range 1000 {
				signer := peer.ID(string(ids[2]) + string(rune(i)))
				if d.Admit(ids[1], signer, t0) == nil {
					n++
				}
			}
			return n
		}, 64, ""},
		{"own messages are not charged to a forwarder", func(d *Directory, ids []peer.ID) int {
			n := 0
			for i := range 1000 {
				signer := peer.ID(string(ids[2]) + string(rune(i)))
				if d.Admit("", signer, t0) == nil {
					n++
				}
			}
			return n
		}, 1000, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := New()
			d.SetLimits(DefaultLimits(iv))
			if got := tc.run(d, []peer.ID{newID(t), newID(t), newID(t)}); got != tc.want {
				t.Fatalf("admitted %d, want %d %s", got, tc.want, tc.comment)
			}
		})
	}
}

// TestAdmitTableBounded: the per-peer rate tables never exceed twice the
// directory's bound, and idle buckets are forgotten on Expire.
func TestAdmitTableBounded(t *testing.T) {
	d := New(WithMaxEntries(10))
	d.SetLimits(DefaultLimits(time.Second))
	refused := 0
	for i := range 100 {
		if d.Admit(peer.ID(rune(i+1)), peer.ID(rune(i+1000)), t0) != nil {
			refused++
		}
	}
	if len(d.signers) > 20 || len(d.forwarders) > 20 || refused != 80 {
		t.Fatalf("tables %d/%d, %d refused; want at most 20 each and 80 refused", len(d.signers), len(d.forwarders), refused)
	}
	d.Expire(t0.Add(time.Second))
	if len(d.signers)+len(d.forwarders) != 0 {
		t.Fatalf("idle buckets kept: %d signers, %d forwarders", len(d.signers), len(d.forwarders))
	}
}

// TestRampFromWarmup: entries a directory takes in during its warm-up are
// established (ramp from the zero time); later ones ramp from first sight,
// and an update keeps it.
func TestRampFromWarmup(t *testing.T) {
	d := New()
	d.SetLimits(DefaultLimits(time.Second))
	old, young := newID(t), newID(t)
	if _, err := d.Apply(old, ann(old, 1), t0); err != nil {
		t.Fatal(err)
	}
	late := t0.Add(DefaultLimits(time.Second).Warmup)
	if _, err := d.Apply(young, ann(young, 1), late); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Apply(young, ann(young, 2), late.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	s := d.Snapshot()
	if e, _ := s.Get(old); !e.RampFrom.IsZero() {
		t.Fatalf("entry seen in warm-up ramps from %v", e.RampFrom)
	}
	if e, _ := s.Get(young); !e.RampFrom.Equal(late) {
		t.Fatalf("later entry ramps from %v, want %v", e.RampFrom, late)
	}
}
