package supernode

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// forgedIDs returns a function making distinct valid peer IDs cheaply: an
// Ed25519 peer ID (an identity multihash of the key) with its last 4 bytes
// replaced by i. Nobody holds their keys: records about them carry no valid
// claim, which the bounds refuse before any signature is checked.
func forgedIDs(t testing.TB) func(i uint32) []byte {
	base := []byte(newPeerID(t))
	return func(i uint32) []byte {
		b := append([]byte(nil), base...)
		binary.BigEndian.PutUint32(b[len(b)-4:], i)
		return b
	}
}

// sybils makes n clients whose keys an attacker holds (newPeerID's keys):
// it can sign claims for them, so only the bounds stop it.
func sybils(t testing.TB, n int) []peer.ID {
	t.Helper()
	out := make([]peer.ID, n)
	for i := range out {
		out[i] = newPeerID(t)
	}
	return out
}

// TestPresenceBounded: one directory supernode claims 500,000 sessions (on
// the old code all were stored: 500,000 records, heap +94 MB in this
// test, 37 → 161 MB in the measured attack). Now it holds at most its share
// of the bound, the rest is refused and counted; another supernode's client
// is still recorded; and once two flooders fill the whole bound, this
// supernode's own attached clients are still recorded, and expired records
// still go.
func TestPresenceBounded(t *testing.T) {
	n := newTestNet(t)
	var rp ring.Published
	now := time.Unix(1000, 0)
	var clock clockValue
	clock.set(now)
	// A small bound keeps the signed part of the flood quick; the default
	// bound's floor is checked in TestRecordBoundsDefaults.
	const bound = 2000
	sn := newSupernode(t, n, supernodeConfig{capacity: 100, adm: AdmissionConfig{Keepalive: 10 * time.Second},
		router: &RouterConfig{Ring: rp.Load, Now: clock.get, Refresh: time.Hour, MaxPresence: bound}})
	rp.Publish(newRing(t, sn.h.ID()))
	b := sn.r.bounds
	if b.presence != bound || b.presencePerOrigin != bound/2 {
		t.Fatalf("bounds %+v, want %d and half of it per origin", b, bound)
	}
	// The flooder signs claims for as many sybil clients as its share
	// holds (it can: it made their keys), then sends unsigned records for
	// the rest of 500,000, which the bound refuses unchecked.
	flood := func(from peer.ID, records int) {
		signed := sybils(t, b.presencePerOrigin)
		id := forgedIDs(t)
		for start := 0; start < records; start += batchLimit {
			batch := &pb.PresenceBatch{}
			for i := start; i < start+batchLimit; i++ {
				if i < len(signed) {
					batch.Records = append(batch.Records, presenceBatch(signed[i], from, 1, true).Records[0])
					continue
				}
				batch.Records = append(batch.Records, &pb.PresenceRecord{Client: id(uint32(i)), Location: []byte(from), SessionSeq: 1, Attached: true})
			}
			sn.r.applyPresence(from, batch)
		}
	}
	size := func() int { sn.r.mu.Lock(); defer sn.r.mu.Unlock(); return len(sn.r.presence) }

	hostile := newPeerID(t)
	flood(hostile, 500_000)
	st := sn.r.Stats()
	if got := size(); got != b.presencePerOrigin {
		t.Fatalf("%d records after the flood, want the flooder's share %d", got, b.presencePerOrigin)
	}
	if got := st.PresenceOriginFull.Load(); got != 500_000-uint64(b.presencePerOrigin) {
		t.Fatalf("%d refusals counted, want %d", got, 500_000-b.presencePerOrigin)
	}
	other, client := newPeerID(t), newPeerID(t)
	sn.r.applyPresence(other, presenceBatch(client, other, 1, true))
	if p, ok := presenceOf(sn.r, client); !ok || p.location != other {
		t.Fatal("another supernode's client not recorded during the flood")
	}

	// A second flooder fills the rest: the bound is full.
	flood(newPeerID(t), 500_000)
	if got := size(); got != b.presence {
		t.Fatalf("%d records, want the bound %d", got, b.presence)
	}
	if st.PresenceFull.Load() == 0 {
		t.Fatal("refusals at the full bound not counted")
	}
	late := newPeerID(t)
	sn.r.applyPresence(other, presenceBatch(late, other, 1, true))
	if _, ok := presenceOf(sn.r, late); ok {
		t.Fatal("a new record from another supernode stored past the bound")
	}
	// This supernode's own client is recorded past the bound.
	ch := n.host(t)
	mustAccept(t, ch, sn.h.ID(), 1)
	waitFor(t, "the own client's presence", func() bool {
		p, ok := presenceOf(sn.r, ch.ID())
		return ok && p.location == sn.h.ID()
	})

	// Expiry still removes the flood (the own session is refreshed).
	clock.set(now.Add(4 * time.Hour))
	sn.r.refresh()
	if got := size(); got != 1 {
		t.Fatalf("%d records after expiry, want only the own client's", got)
	}
	sn.r.mu.Lock()
	total, by := sn.r.presenceBy.total, len(sn.r.presenceBy.by)
	sn.r.mu.Unlock()
	if total != 1 || by != 1 {
		t.Fatalf("presence counts: total %d over %d origins, want 1 over 1", total, by)
	}
}

// TestMembershipsBounded: one directory supernode joins forged members to
// forged groups at this home: it gets its share of the membership bound,
// then refusals are counted; another supernode's member still joins; this
// supernode's own clients always do.
func TestMembershipsBounded(t *testing.T) {
	n := newTestNet(t)
	var rp ring.Published
	sn := newSupernode(t, n, supernodeConfig{capacity: 4, adm: AdmissionConfig{Keepalive: 10 * time.Second},
		router: &RouterConfig{Ring: rp.Load, MaxMemberships: 1000}})
	rp.Publish(newRing(t, sn.h.ID()))
	hostile, other := newPeerID(t), newPeerID(t)
	id := forgedIDs(t)
	signed := sybils(t, 500) // the flooder's share, with claims it can sign
	for start := 0; start < 10_000; start += batchLimit {
		batch := &pb.MembershipBatch{}
		for i := start; i < start+batchLimit; i++ {
			g := fmt.Sprintf("g%d", i)
			if i < len(signed) {
				batch.Records = append(batch.Records, membershipRecord(t, signed[i], hostile, g))
				continue
			}
			batch.Records = append(batch.Records, &pb.MembershipRecord{Group: g, Member: id(uint32(i)), Supernode: []byte(hostile), Join: true})
		}
		sn.r.applyMembership(hostile, batch)
	}
	st := sn.r.Stats()
	sn.r.mu.Lock()
	total, homes := sn.r.core.MembershipsHeld()
	sn.r.mu.Unlock()
	if total != 500 || homes > 500 {
		t.Fatalf("%d memberships in %d home groups, want the flooder's share 500", total, homes)
	}
	if got := st.MembershipsOriginFull.Load(); got != 9500 {
		t.Fatalf("%d refusals counted, want 9500", got)
	}
	m := newPeerID(t)
	sn.r.applyMembership(other, &pb.MembershipBatch{Records: []*pb.MembershipRecord{membershipRecord(t, m, other, "g")}})
	ok := sn.r.memberAt("g", m) == other
	if !ok {
		t.Fatal("another supernode's member not recorded during the flood")
	}
}

// clockValue is a settable clock for RouterConfig.Now.
type clockValue struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clockValue) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func (c *clockValue) get() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// membershipRecord is member's signed join of group at supernode sn, as sn
// relays it to the group's home.
func membershipRecord(t testing.TB, member, sn peer.ID, group string) *pb.MembershipRecord {
	t.Helper()
	claim, err := protocol.SignMembership(keyOf(t, member), protocol.Membership{Group: group, Supernode: sn, Join: true, Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	return &pb.MembershipRecord{Group: group, Member: []byte(member), Supernode: []byte(sn), Join: true, Claim: claim}
}

// TestRecordBoundsDefaults: the default bounds' floors, and their share
// per sending supernode.
func TestRecordBoundsDefaults(t *testing.T) {
	b := newRecordBounds(100, 0, 0)
	if b.presence != minPresence || b.presencePerOrigin != minPresence/2 {
		t.Fatalf("bounds %+v, want the floor %d and half of it per origin", b, minPresence)
	}
}
