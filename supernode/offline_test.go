package supernode

import (
	"crypto/rand"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode/store"
)

// testClock is a settable clock.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// edHost adds a host with an Ed25519 identity (overlayd peers' kind, the
// only one direct messages can be sealed to), linked and connected to the
// hosts already on n.
func (n *testNet) edHost(t testing.TB) host.Host {
	t.Helper()
	sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	addr := ma.StringCast(fmt.Sprintf("/ip4/100.64.%d.%d/tcp/4242", len(n.hosts)/250, len(n.hosts)%250+1))
	n.mu.Unlock()
	h, err := n.mn.AddPeer(sk, addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range n.hosts {
		if _, err := n.mn.LinkPeers(h.ID(), o.ID()); err != nil {
			t.Fatal(err)
		}
		if _, err := n.mn.ConnectPeers(h.ID(), o.ID()); err != nil {
			t.Fatal(err)
		}
	}
	dh := deadlineHost{Host: h, net: n}
	n.hosts = append(n.hosts, dh)
	return dh
}

// offlineNode is a supernode with an offline store, alone on its ring
// (so it is the whole home cluster of every client), on a settable clock.
type offlineNode struct {
	*testSupernode
	st    *store.Store
	clock *testClock
}

func newOfflineNode(t testing.TB, n *testNet, lim store.Limits, ttl time.Duration) *offlineNode {
	t.Helper()
	clock := &testClock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	st, err := store.Open(filepath.Join(t.TempDir(), "store.db"), lim, store.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() }) // after the router's (cleanups run last in, first out)
	var rp ring.Published
	sn := newSupernode(t, n, supernodeConfig{capacity: 10, router: &RouterConfig{
		Ring: rp.Load, Store: st, OfflineTTL: ttl, Now: clock.Now, Refresh: time.Hour,
	}})
	rp.Publish(newRing(t, sn.h.ID()))
	return &offlineNode{testSupernode: sn, st: st, clock: clock}
}

// sealedTo is a direct message from sender (a newPeerID) to recipient, as
// the sender's supernode asks a replica to store it.
func sealedTo(t testing.TB, sender peer.ID, senderKey crypto.PrivKey, recipient peer.ID, text string) *pb.DirectMessage {
	t.Helper()
	id := protocol.NewMessageID()
	sealed, err := protocol.SealDirect(senderKey, recipient, id, time.Now(), []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return &pb.DirectMessage{Id: id, From: []byte(sender), To: []byte(recipient), Sealed: sealed}
}

func storeReq(m *pb.DirectMessage, expires time.Time) *pb.StoreRequest {
	return &pb.StoreRequest{Message: m, ExpiresUnixMs: expires.UnixMilli()}
}

// TestReplicaChecksStoreRequests: a replica stores a message only when its
// sender signed it for that recipient and ID (so no supernode can store in
// another sender's name and spend its quota), only as a member of the
// recipient's home cluster, and only within the quotas, answering each
// refusal with its reason.
func TestReplicaChecksStoreRequests(t *testing.T) {
	n := newTestNet(t)
	on := newOfflineNode(t, n, store.Limits{OfflinePerRecipient: store.Quota{Count: 2}}, time.Hour)
	sender, recipient, attacker := newPeerID(t), newPeerID(t), newPeerID(t)
	exp := on.clock.Now().Add(time.Minute)

	forged := sealedTo(t, attacker, keyOf(t, attacker), recipient, "in the sender's name")
	forged.From = []byte(sender)
	genuine := sealedTo(t, sender, keyOf(t, sender), recipient, "hello")
	otherID := sealedTo(t, sender, keyOf(t, sender), recipient, "x")
	otherID.Id = protocol.NewMessageID()

	for _, tc := range []struct {
		name   string
		req    *pb.StoreRequest
		want   pb.Result_Status
		detail string
	}{
		{"signed by another sender", storeReq(forged, exp), pb.Result_STATUS_INVALID, "signed by"},
		{"signed for another id", storeReq(otherID, exp), pb.Result_STATUS_INVALID, "another message"},
		{"already expired", storeReq(genuine, on.clock.Now()), pb.Result_STATUS_INVALID, "expired"},
		{"genuine", storeReq(genuine, exp), pb.Result_STATUS_STORED, ""},
		{"genuine again (a retry)", storeReq(genuine, exp), pb.Result_STATUS_STORED, ""},
		{"second", storeReq(sealedTo(t, sender, keyOf(t, sender), recipient, "2"), exp), pb.Result_STATUS_STORED, ""},
		{"over the recipient's quota", storeReq(sealedTo(t, sender, keyOf(t, sender), recipient, "3"), exp), pb.Result_STATUS_OVER_QUOTA, "quota"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := on.r.putStored(tc.req)
			if res.GetStatus() != tc.want || !strings.Contains(res.GetDetail(), tc.detail) {
				t.Fatalf("putStored = %v %q, want %v with %q", res.GetStatus(), res.GetDetail(), tc.want, tc.detail)
			}
		})
	}
	if got := on.st.OfflineCount(string(recipient)); got != 2 {
		t.Fatalf("stored %d messages, want 2", got)
	}
	if s := &on.r.stats; s.OfflineInvalid.Load() != 3 || s.OfflineStored.Load() != 2 || s.OfflineOverQuota.Load() != 1 {
		t.Fatalf("counted invalid %d stored %d over quota %d, want 3 2 1", s.OfflineInvalid.Load(), s.OfflineStored.Load(), s.OfflineOverQuota.Load())
	}

	// A supernode that is not in the recipient's home cluster by its own
	// ring refuses.
	var rp ring.Published
	rp.Publish(newRing(t, newPeerID(t)))
	on.r.cfg.Ring = rp.Load
	if res := on.r.putStored(storeReq(sealedTo(t, sender, keyOf(t, sender), newPeerID(t), "elsewhere"), exp)); res.GetStatus() != pb.Result_STATUS_INVALID || !strings.Contains(res.GetDetail(), "home cluster") {
		t.Fatalf("a replica outside the home cluster answered %v %q", res.GetStatus(), res.GetDetail())
	}
}

// TestStoredForwardedOnAttachAndDeletedOnAck: a replica holding messages
// for a client forwards them, in put order and with itself as the origin,
// when the client attaches; a forged ack deletes nothing, the recipient's
// signed ack deletes its message.
func TestStoredForwardedOnAttachAndDeletedOnAck(t *testing.T) {
	n := newTestNet(t)
	on := newOfflineNode(t, n, store.Limits{}, time.Hour)
	rh := n.edHost(t)
	recipient := rh.ID()
	sender := newPeerID(t)
	var sent []*pb.DirectMessage
	for i := range 3 {
		m := sealedTo(t, sender, keyOf(t, sender), recipient, fmt.Sprintf("m%d", i))
		if res := on.r.putStored(storeReq(m, on.clock.Now().Add(time.Minute))); res.GetStatus() != pb.Result_STATUS_STORED {
			t.Fatalf("store: %v %q", res.GetStatus(), res.GetDetail())
		}
		sent = append(sent, m)
	}
	c := mustAccept(t, rh, on.h.ID(), 1)
	for i, want := range sent {
		var f pb.SessionFrame
		if err := c.read(&f); err != nil {
			t.Fatalf("read delivery %d: %v", i, err)
		}
		d := f.GetDeliver()
		if d == nil || string(d.GetId()) != string(want.GetId()) || peer.ID(d.GetOrigin()) != on.h.ID() {
			t.Fatalf("delivery %d: %v, want message %x with origin the replica", i, &f, want.GetId())
		}
	}
	// A forged ack (signed by the sender, not the recipient) and an ack
	// signed for another message delete nothing.
	forgedSig, err := protocol.SignAck(keyOf(t, sender), sender, sent[0].GetId())
	if err != nil {
		t.Fatal(err)
	}
	wrongSig, err := protocol.SignAck(rh.Peerstore().PrivKey(recipient), sender, sent[1].GetId())
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range [][]byte{forgedSig, wrongSig, nil} {
		on.r.onRelay(on.h.ID(), &pb.RelayFrame{Kind: &pb.RelayFrame_Ack{Ack: &pb.Ack{Id: sent[0].GetId(), From: []byte(recipient), To: []byte(sender), Origin: []byte(on.h.ID()), Signed: sig}}})
	}
	waitFor(t, "the forged acks refused", func() bool { return on.r.stats.OfflineForgedAcks.Load() == 3 })
	if got := on.st.OfflineCount(string(recipient)); got != 3 {
		t.Fatalf("after forged acks %d stored, want 3", got)
	}
	// The recipient's signed acks, through its session, delete.
	for _, m := range sent {
		sig, err := protocol.SignAck(rh.Peerstore().PrivKey(recipient), sender, m.GetId())
		if err != nil {
			t.Fatal(err)
		}
		c.send(&pb.SessionFrame{Kind: &pb.SessionFrame_Ack{Ack: &pb.Ack{Id: m.GetId(), To: []byte(sender), Origin: []byte(on.h.ID()), Signed: sig}}})
	}
	waitFor(t, "the acked messages deleted", func() bool { return on.st.OfflineCount(string(recipient)) == 0 })
	if d := on.r.stats.OfflineDeleted.Load(); d != 3 {
		t.Fatalf("deleted %d, want 3", d)
	}
}

// TestStoredExpire: a stored message past its TTL is removed and counted by
// the refresh, and not delivered when its recipient attaches.
func TestStoredExpire(t *testing.T) {
	n := newTestNet(t)
	on := newOfflineNode(t, n, store.Limits{}, time.Minute)
	rh := n.edHost(t)
	sender := newPeerID(t)
	// The replica caps the expiry asked for (an hour) at its own TTL.
	m := sealedTo(t, sender, keyOf(t, sender), rh.ID(), "too late")
	if res := on.r.putStored(storeReq(m, on.clock.Now().Add(time.Hour))); res.GetStatus() != pb.Result_STATUS_STORED {
		t.Fatalf("store: %v %q", res.GetStatus(), res.GetDetail())
	}
	on.clock.Advance(time.Minute)
	on.r.refresh()
	if got, exp := on.st.OfflineCount(string(rh.ID())), on.r.stats.OfflineExpired.Load(); got != 0 || exp != 1 {
		t.Fatalf("after the TTL: %d stored, %d expired; want 0, 1", got, exp)
	}
	// Attached now, the recipient gets nothing: a ping's pong is the
	// first frame it reads.
	c := mustAccept(t, rh, on.h.ID(), 1)
	if f := c.ping(1); f.GetPong() == nil {
		t.Fatalf("first frame after attach: %v, want the pong (no expired delivery)", f)
	}
	if d := on.r.stats.OfflineDelivered.Load(); d != 0 {
		t.Fatalf("forwarded %d expired messages", d)
	}
}

// TestStoreOfflineTally: the sender's supernode answers STORED once a
// majority of the home cluster stored, OVER_QUOTA once a majority refused
// for a quota, and otherwise neither (never a silent loss).
func TestStoreOfflineTally(t *testing.T) {
	ok := &pb.StoreResult{Status: pb.Result_STATUS_STORED}
	quota := &pb.StoreResult{Status: pb.Result_STATUS_OVER_QUOTA, Detail: "store: over quota: recipient"}
	busy := &pb.StoreResult{Status: pb.Result_STATUS_BUSY}
	bad := &pb.StoreResult{Status: pb.Result_STATUS_INVALID}
	r := &Router{cfg: RouterConfig{LookupTimeout: time.Millisecond, OfflineTTL: time.Hour}, stop: make(chan struct{})}
	for _, tc := range []struct {
		name    string
		n       int
		answers []*pb.StoreResult
		want    pb.Result_Status
	}{
		{"3 of 3", 3, []*pb.StoreResult{ok, ok, ok}, pb.Result_STATUS_STORED},
		{"2 of 3", 3, []*pb.StoreResult{bad, ok, ok}, pb.Result_STATUS_STORED},
		{"2 of 3, one silent", 3, []*pb.StoreResult{ok, ok}, pb.Result_STATUS_STORED},
		{"1 of 3, others silent", 3, []*pb.StoreResult{ok}, pb.Result_STATUS_UNREACHABLE},
		{"1 of 3, one busy", 3, []*pb.StoreResult{ok, busy, bad}, pb.Result_STATUS_BUSY},
		{"quota at 2 of 3", 3, []*pb.StoreResult{quota, ok, quota}, pb.Result_STATUS_OVER_QUOTA},
		{"quota at 1 of 3", 3, []*pb.StoreResult{quota, ok, bad}, pb.Result_STATUS_UNREACHABLE},
		{"1 of 1", 1, []*pb.StoreResult{ok}, pb.Result_STATUS_STORED},
		{"1 of 2", 2, []*pb.StoreResult{ok, bad}, pb.Result_STATUS_UNREACHABLE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &storeWait{ch: make(chan *pb.StoreResult, tc.n)}
			for _, a := range tc.answers {
				w.ch <- a
			}
			st, detail := r.tallyStore(w, tc.n)
			if st != tc.want {
				t.Fatalf("tally = %v %q, want %v", st, detail, tc.want)
			}
			if st == pb.Result_STATUS_OVER_QUOTA && !strings.Contains(detail, "quota") {
				t.Fatalf("over quota without naming it: %q", detail)
			}
		})
	}
}
