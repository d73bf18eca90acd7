package supernode

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/protocol"
)

func TestAnnouncerSeqIncreases(t *testing.T) {
	_, pub, _ := crypto.GenerateEd25519Key(rand.Reader)
	id, _ := peer.IDFromPublicKey(pub)
	a, err := NewAnnouncer(id, protocol.RoleSupernode, 10, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	addrs := []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/1")}
	now := time.Unix(1000, 0)
	var last uint64
	// Seq grows even when the clock stands still or goes back.
	for i, at := range []time.Time{now, now, now.Add(-time.Hour), now.Add(time.Second)} {
		b, err := a.Next(addrs, i, false, at)
		if err != nil {
			t.Fatal(err)
		}
		got, err := protocol.UnmarshalAnnouncement(b)
		if err != nil {
			t.Fatal(err)
		}
		if got.Seq <= last {
			t.Fatalf("announcement %d: seq %d not above %d", i, got.Seq, last)
		}
		last = got.Seq
	}
	// A restart (new Announcer) starts from the wall clock, above the old seqs.
	b, _ := NewAnnouncer(id, protocol.RoleSupernode, 10, time.Second)
	raw, err := b.Next(addrs, 0, false, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := protocol.UnmarshalAnnouncement(raw)
	if got.Seq <= last {
		t.Fatalf("restarted seq %d not above %d", got.Seq, last)
	}
}

func TestNewAnnouncerRejects(t *testing.T) {
	_, pub, _ := crypto.GenerateEd25519Key(rand.Reader)
	id, _ := peer.IDFromPublicKey(pub)
	for _, tc := range []struct {
		name     string
		id       peer.ID
		role     protocol.Role
		capacity int
		interval time.Duration
	}{
		{"empty id", "", protocol.RoleSupernode, 1, time.Second},
		{"capacity 0", id, protocol.RoleSupernode, 0, time.Second},
		{"bad role", id, protocol.Role(7), 1, time.Second},
		{"interval too short", id, protocol.RoleSupernode, 1, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewAnnouncer(tc.id, tc.role, tc.capacity, tc.interval); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
