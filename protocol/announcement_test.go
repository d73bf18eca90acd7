package protocol

import (
	"bytes"
	"crypto/rand"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/protocol/pb"
)

func testID(tb testing.TB) peer.ID {
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

func validAnnouncement(tb testing.TB) Announcement {
	tb.Helper()
	return Announcement{
		ID:       testID(tb),
		Addrs:    []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/4101"), ma.StringCast("/ip4/127.0.0.1/udp/4101/quic-v1")},
		Role:     RoleSupernode,
		Capacity: 100,
		Load:     7,
		Version:  Version,
		Seq:      42,
		Interval: 10 * time.Second,
	}
}

func TestAnnouncementRoundTrip(t *testing.T) {
	a := validAnnouncement(t)
	b, err := a.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := UnmarshalAnnouncement(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != a.ID || got.Capacity != a.Capacity || got.Load != a.Load || got.Seq != a.Seq ||
		got.Interval != a.Interval || got.Role != a.Role || len(got.Addrs) != 2 || !got.Addrs[1].Equal(a.Addrs[1]) {
		t.Fatalf("round trip: got %+v, want %+v", got, a)
	}
}

func TestUnmarshalAnnouncementRejects(t *testing.T) {
	base := validAnnouncement(t)
	encode := func(mut func(m *pb.Announcement)) []byte {
		m := &pb.Announcement{
			PeerId: []byte(base.ID), Role: pb.Role_ROLE_SUPERNODE, Capacity: 10,
			ProtocolVersion: Version, Seq: 1, IntervalMs: 1000,
			Addrs: [][]byte{base.Addrs[0].Bytes()},
		}
		mut(m)
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name string
		data []byte
		want Reason
	}{
		{"64 KiB", bytes.Repeat([]byte{0}, 64<<10), ReasonOversize},
		{"just over limit", encode(func(m *pb.Announcement) { m.Addrs = append(m.Addrs, make([]byte, MaxAnnouncementSize)) }), ReasonOversize},
		{"garbage", []byte{0xff, 0xff, 0xff}, ReasonUndecodable},
		{"no peer id", encode(func(m *pb.Announcement) { m.PeerId = nil }), ReasonInvalid},
		{"capacity 0", encode(func(m *pb.Announcement) { m.Capacity = 0 }), ReasonInvalid},
		{"no addrs", encode(func(m *pb.Announcement) { m.Addrs = nil }), ReasonInvalid},
		{"bad addr", encode(func(m *pb.Announcement) { m.Addrs = [][]byte{{0xff, 0x01}} }), ReasonInvalid},
		{"too many addrs", encode(func(m *pb.Announcement) {
			for range MaxAnnouncedAddrs {
				m.Addrs = append(m.Addrs, base.Addrs[0].Bytes())
			}
		}), ReasonInvalid},
		{"unknown role", encode(func(m *pb.Announcement) { m.Role = 9 }), ReasonInvalid},
		{"unspecified role", encode(func(m *pb.Announcement) { m.Role = pb.Role_ROLE_UNSPECIFIED }), ReasonInvalid},
		{"interval 0", encode(func(m *pb.Announcement) { m.IntervalMs = 0 }), ReasonInvalid},
		{"interval huge", encode(func(m *pb.Announcement) { m.IntervalMs = 1 << 31 }), ReasonInvalid},
		{"seq 0", encode(func(m *pb.Announcement) { m.Seq = 0 }), ReasonInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := UnmarshalAnnouncement(tt.data)
			if got := ReasonOf(err); got != tt.want {
				t.Fatalf("reason = %q (err %v), want %q", got, err, tt.want)
			}
		})
	}
}

func TestMarshalRefusesInvalid(t *testing.T) {
	a := validAnnouncement(t)
	a.Capacity = 0
	if _, err := a.Marshal(); ReasonOf(err) != ReasonInvalid {
		t.Fatalf("Marshal of capacity 0: err = %v, want invalid", err)
	}
}

func FuzzUnmarshalAnnouncement(f *testing.F) {
	a := validAnnouncement(f)
	b, err := a.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x02, 0x00, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := UnmarshalAnnouncement(data)
		if err != nil {
			if ReasonOf(err) == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		// Whatever decodes must re-encode and decode to the same thing.
		again, err := got.Marshal()
		if err != nil {
			t.Fatalf("accepted announcement does not re-marshal: %v", err)
		}
		back, err := UnmarshalAnnouncement(again)
		if err != nil || back.ID != got.ID || back.Seq != got.Seq || len(back.Addrs) != len(got.Addrs) {
			t.Fatalf("re-decode: %+v, %v; want %+v", back, err, got)
		}
	})
}

func TestClampInterval(t *testing.T) {
	for _, tc := range []struct {
		name             string
		announced, local time.Duration
		want             time.Duration
	}{
		{"within range", 10 * time.Second, 10 * time.Second, 10 * time.Second},
		{"long claim clamped to twice the receiver's", MaxAnnounceInterval, 10 * time.Second, 20 * time.Second},
		{"short claim kept", MinAnnounceInterval, 10 * time.Second, MinAnnounceInterval},
		{"no receiver bound", MaxAnnounceInterval, 0, MaxAnnounceInterval},
		{"tiny receiver interval still allows the minimum", time.Second, time.Millisecond, MinAnnounceInterval},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ClampInterval(tc.announced, tc.local); got != tc.want {
				t.Fatalf("ClampInterval(%v, %v) = %v, want %v", tc.announced, tc.local, got, tc.want)
			}
		})
	}
}

// TestAnnouncementFreshness: issued_unix_ms round-trips, and an old
// (replayed) or future-dated announcement is refused with its own reason.
func TestAnnouncementFreshness(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	iv := 10 * time.Second
	for _, tc := range []struct {
		name   string
		issued time.Time
		want   Reason
	}{
		{"fresh", now, ""},
		{"no issued time (earlier build)", time.Time{}, ""},
		{"within the skew allowance ahead", now.Add(ClockSkew), ""},
		{"too far ahead", now.Add(ClockSkew + time.Millisecond), ReasonFuture},
		{"last moment of validity", now.Add(-Validity(iv) - ClockSkew + time.Millisecond), ""},
		{"expired: a replay", now.Add(-Validity(iv) - ClockSkew), ReasonExpired},
		{"expired long ago", now.Add(-time.Hour), ReasonExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := validAnnouncement(t)
			a.Issued = tc.issued
			b, err := a.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			got, err := UnmarshalAnnouncement(b)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Issued.Equal(tc.issued) {
				t.Fatalf("issued %v after a round trip, want %v", got.Issued, tc.issued)
			}
			if r := ReasonOf(got.CheckFresh(now, iv)); r != tc.want {
				t.Fatalf("CheckFresh reason %q, want %q", r, tc.want)
			}
		})
	}
}
