package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// fakeSupernode speaks the supernode side of attach by script: it answers
// every attach with answer(), and on ACCEPT answers pings with pongs and
// hands every other frame to got. Its sessions are reachable with send.
type fakeSupernode struct {
	h      host.Host
	answer func() *pb.AttachResponse

	mu       sync.Mutex
	sessions []network.Stream
	got      chan *pb.SessionFrame
	asked    int
}

func newFake(t *testing.T, mn mocknet.Mocknet, answer func() *pb.AttachResponse) *fakeSupernode {
	t.Helper()
	h, err := mn.GenPeer()
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeSupernode{h: h, answer: answer, got: make(chan *pb.SessionFrame, 64)}
	h.SetStreamHandler(protocol.AttachID, f.handle)
	return f
}

func (f *fakeSupernode) handle(s network.Stream) {
	fr := protocol.NewFrameReader(s, protocol.MaxSessionFrame)
	var req pb.AttachRequest
	if err := fr.Read(&req); err != nil {
		s.Reset()
		return
	}
	f.mu.Lock()
	f.asked++
	f.mu.Unlock()
	resp := f.answer()
	accept := resp.GetStatus() == pb.AttachResponse_STATUS_ACCEPT
	if accept {
		// Known before the client can see ACCEPT, so a test that saw the
		// client attached finds the session here.
		f.mu.Lock()
		f.sessions = append(f.sessions, s)
		f.mu.Unlock()
	}
	if err := protocol.WriteFrame(s, resp); err != nil || !accept {
		s.Close()
		return
	}
	for {
		var sf pb.SessionFrame
		if err := fr.Read(&sf); err != nil {
			s.Reset()
			return
		}
		if p := sf.GetPing(); p != nil {
			f.send(s, &pb.SessionFrame{Kind: &pb.SessionFrame_Pong{Pong: &pb.Pong{Seq: p.GetSeq()}}})
			continue
		}
		select {
		case f.got <- &sf:
		default:
		}
	}
}

func (f *fakeSupernode) send(s network.Stream, sf *pb.SessionFrame) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = protocol.WriteFrame(s, sf)
}

// session returns the newest accepted session stream, or nil.
func (f *fakeSupernode) session() network.Stream {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sessions) == 0 {
		return nil
	}
	return f.sessions[len(f.sessions)-1]
}

func (f *fakeSupernode) timesAsked() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked
}

// staticDir is a fixed directory.
type staticDir struct{ snap *directory.Snapshot }

func (d staticDir) Snapshot() *directory.Snapshot { return d.snap }

// waitUntil polls cond until it holds or within passes (an event bound,
// generous for a loaded machine).
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startClient runs a client on a new mocknet host with the given
// directory and bootstrap peers; it stops with the test.
func startClient(t *testing.T, mn mocknet.Mocknet, snap *directory.Snapshot, boot []peer.AddrInfo, opts ...Option) (*Client, host.Host) {
	t.Helper()
	return startClientOnRing(t, mn, snap, &ring.Published{}, boot, opts...)
}

// startClientOnRing is startClient with the ring the client plans with.
func startClientOnRing(t *testing.T, mn mocknet.Mocknet, snap *directory.Snapshot, rings *ring.Published, boot []peer.AddrInfo, opts ...Option) (*Client, host.Host) {
	t.Helper()
	h := edPeer(t, mn)
	if err := mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	c, err := New(h, staticDir{snap}, rings, Config{
		AnnounceInterval: 20 * time.Millisecond, RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond,
		ReturnInterval: time.Hour, AckTimeout: 10 * time.Second, Bootstrap: boot,
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return c, h
}

// edKey is a fresh Ed25519 identity: overlayd peers' kind, the only one
// sealed direct messages work with.
func edKey(t testing.TB) (crypto.PrivKey, peer.ID) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return k, id
}

var edPeers atomic.Int32

// edPeer adds a host with an Ed25519 identity to mn (mocknet's GenPeer
// makes ECDSA ones).
func edPeer(t testing.TB, mn mocknet.Mocknet) host.Host {
	t.Helper()
	k, _ := edKey(t)
	h, err := mn.AddPeer(k, ma.StringCast(fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", 20000+edPeers.Add(1))))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func newMocknet(t *testing.T) mocknet.Mocknet {
	t.Helper()
	mn := mocknet.New()
	t.Cleanup(func() { _ = mn.Close() })
	return mn
}

// TestClientFollowsBusyAlternativeThenDeliversOnce: a client whose only
// known supernode is full follows the alternative it offers, attaches
// there, acks a delivered message, hands it to its listener once although
// it arrives twice, and fails over when the supernode detaches it.
func TestClientFollowsBusyAlternativeThenDeliversOnce(t *testing.T) {
	mn := newMocknet(t)
	accept := func() *pb.AttachResponse {
		return &pb.AttachResponse{Status: pb.AttachResponse_STATUS_ACCEPT, KeepaliveMs: 50}
	}
	free := newFake(t, mn, accept)
	full := newFake(t, mn, func() *pb.AttachResponse {
		return &pb.AttachResponse{Status: pb.AttachResponse_STATUS_BUSY, RetryAfterMs: 60_000,
			Alternatives: []*pb.PeerAddrs{protocol.PeerAddrsPB(peer.AddrInfo{ID: free.h.ID()})}}
	})
	var events []Event
	var emu sync.Mutex
	c, h := startClient(t, mn, &directory.Snapshot{}, []peer.AddrInfo{{ID: full.h.ID()}}, WithObserver(func(e Event) {
		emu.Lock()
		events = append(events, e)
		emu.Unlock()
	}))
	l := c.Listen()
	defer l.Close()
	waitUntil(t, 10*time.Second, "attached to the alternative", func() bool {
		a, ok := c.Attachment()
		return ok && a.Supernode == free.h.ID()
	})
	if full.timesAsked() != 1 {
		t.Fatalf("the full supernode was asked %d times in the pass; its retry-after is a minute", full.timesAsked())
	}

	fromKey, from := edKey(t) // another client
	id := protocol.NewMessageID()
	sealed, err := protocol.SealDirect(fromKey, h.ID(), id, time.Now(), []byte("hi"))
	if err != nil {
		t.Fatal(err)
	}
	d := &pb.SessionFrame{Kind: &pb.SessionFrame_Deliver{Deliver: &pb.DirectMessage{Id: id, From: []byte(from), To: []byte(h.ID()), Sealed: sealed}}}
	s := free.session()
	free.send(s, d)
	free.send(s, d) // a retry of the same message
	for range 2 {
		select {
		case f := <-free.got:
			a := f.GetAck()
			if a == nil || string(a.GetId()) != string(id) {
				t.Fatalf("want an ack for each delivery, got %v", f)
			}
			if err := protocol.VerifyAck(a.GetSigned(), h.ID(), from, id); err != nil {
				t.Fatalf("the client's ack is not signed for the sender: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no ack for a delivered message")
		}
	}
	in := <-l.C
	if in.Kind != KindDirect || string(in.Payload) != "hi" || in.From != from {
		t.Fatalf("listener got %+v", in)
	}
	select {
	case dup := <-l.C:
		t.Fatalf("the retried delivery reached the listener again: %+v", dup)
	case <-time.After(100 * time.Millisecond):
	}

	// An orderly detach ends the session; the client counts a failover
	// and attaches to the alternative the detach offers (here the same
	// supernode again: the full one still asks it to wait).
	free.send(s, &pb.SessionFrame{Kind: &pb.SessionFrame_Detach{Detach: &pb.Detach{Reason: "draining", SpreadMs: 1,
		Alternatives: []*pb.PeerAddrs{protocol.PeerAddrsPB(peer.AddrInfo{ID: free.h.ID()})}}}})
	waitUntil(t, 10*time.Second, "failover after detach", func() bool {
		a, ok := c.Attachment()
		return ok && a.Failovers == 1 && free.session() != s
	})
	emu.Lock()
	defer emu.Unlock()
	kinds := map[EventKind]int{}
	for _, e := range events {
		kinds[e.Kind]++
		if e.Node != h.ID() {
			t.Fatalf("event %+v not stamped with the client's ID", e)
		}
	}
	if kinds[EventAttempt] < 3 || kinds[EventSessionEnd] < 1 {
		t.Fatalf("events by kind %v: want attempts and a session end", kinds)
	}
}

// TestClientWithoutSessionRefusesRequests: messaging before any session
// fails fast with ErrNotAttached; Join is kept for the next session.
func TestClientWithoutSessionRefusesRequests(t *testing.T) {
	mn := newMocknet(t)
	h := edPeer(t, mn)
	c, err := New(h, staticDir{&directory.Snapshot{}}, &ring.Published{}, Config{
		AnnounceInterval: time.Second, RetryBase: time.Second, RetryMax: time.Second, ReturnInterval: time.Hour, AckTimeout: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	other := testIDs(t, 1)[0]
	if _, err := c.Send(t.Context(), other, []byte("x")); !errors.Is(err, ErrNotAttached) {
		t.Fatalf("Send without a session: %v, want ErrNotAttached", err)
	}
	if _, err := c.Send(t.Context(), h.ID(), []byte("x")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Send to self: %v, want ErrInvalid", err)
	}
	if _, err := c.Send(t.Context(), other, make([]byte, protocol.MaxPayload+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversize Send: %v, want ErrTooLarge", err)
	}
	if _, err := c.Publish(t.Context(), "", []byte("x")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Publish to an unnamed group: %v, want ErrInvalid", err)
	}
	for _, bad := range []string{"nul\x00", "line\nbreak", "bad\xffutf8"} {
		if err := c.Join(bad); !errors.Is(err, ErrInvalid) || !errors.Is(err, protocol.ErrGroupName) {
			t.Fatalf("Join(%q): %v, want ErrInvalid wrapping protocol.ErrGroupName", bad, err)
		}
	}
	if err := c.Join("g"); err != nil {
		t.Fatalf("Join while detached: %v (it applies on the next session)", err)
	}
	if gs := c.Groups(); len(gs) != 1 || gs[0] != "g" {
		t.Fatalf("Groups = %v", gs)
	}
	if _, err := c.Locate(t.Context(), other); !errors.Is(err, ErrNotAttached) {
		t.Fatalf("Locate without a session: %v", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	mn := newMocknet(t)
	h, err := mn.GenPeer()
	if err != nil {
		t.Fatal(err)
	}
	good := Config{AnnounceInterval: time.Second, RetryBase: time.Second, RetryMax: time.Second, ReturnInterval: time.Hour, AckTimeout: time.Second}
	for _, tc := range []struct {
		name string
		cfg  func(Config) Config
		opt  Option
	}{
		{"zero retry base", func(c Config) Config { c.RetryBase = 0; return c }, nil},
		{"negative debounce", func(c Config) Config { c.RingDebounce = -1; return c }, nil},
		{"nil clock", func(c Config) Config { return c }, WithClock(nil)},
		{"nil logger", func(c Config) Config { return c }, WithLogger(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []Option
			if tc.opt != nil {
				opts = append(opts, tc.opt)
			}
			if _, err := New(h, staticDir{&directory.Snapshot{}}, &ring.Published{}, tc.cfg(good), opts...); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
}

// TestClientRefusesForgeries: a supernode (or anyone on the path) that
// forges a direct message in another client's name gets it neither acked
// nor delivered, and one that forges the recipient's ack does not make the
// sender believe the message was delivered. Both are counted.
func TestClientRefusesForgeries(t *testing.T) {
	mn := newMocknet(t)
	sn := newFake(t, mn, func() *pb.AttachResponse {
		return &pb.AttachResponse{Status: pb.AttachResponse_STATUS_ACCEPT, KeepaliveMs: 50}
	})
	reg := prometheus.NewRegistry()
	c, h := startClient(t, mn, &directory.Snapshot{}, []peer.AddrInfo{{ID: sn.h.ID()}}, WithRegisterer(reg))
	l := c.Listen()
	defer l.Close()
	waitUntil(t, 10*time.Second, "attached", func() bool { _, ok := c.Attachment(); return ok })
	s := sn.session()

	// A message "from" victim, sealed and signed by the attacker.
	attackerKey, _ := edKey(t)
	_, victim := edKey(t)
	id := protocol.NewMessageID()
	forged, err := protocol.SealDirect(attackerKey, h.ID(), id, time.Now(), []byte("send me your password"))
	if err != nil {
		t.Fatal(err)
	}
	sn.send(s, &pb.SessionFrame{Kind: &pb.SessionFrame_Deliver{Deliver: &pb.DirectMessage{Id: id, From: []byte(victim), To: []byte(h.ID()), Sealed: forged}}})
	// A plaintext message with no seal, as before sealing existed.
	sn.send(s, &pb.SessionFrame{Kind: &pb.SessionFrame_Deliver{Deliver: &pb.DirectMessage{Id: protocol.NewMessageID(), From: []byte(victim), To: []byte(h.ID()), Payload: []byte("plain")}}})
	waitUntil(t, 10*time.Second, "both forgeries counted", func() bool {
		return testutil.ToFloat64(c.m.refused.WithLabelValues(refusedSignature)) == 2
	})
	select {
	case in := <-l.C:
		t.Fatalf("a forged message reached the listener: %+v", in)
	case f := <-sn.got:
		t.Fatalf("a forged message was acked: %v", f)
	default:
	}

	// The client sends to recipient; the supernode answers with an ack
	// the recipient did not sign, then with one it did.
	recipientKey, recipient := edKey(t)
	done := make(chan error, 1)
	var msgID []byte
	go func() {
		var err error
		var res SendResult
		res, err = c.Send(context.Background(), recipient, []byte("hello"))
		msgID = res.ID
		done <- err
	}()
	var send *pb.DirectMessage
	select {
	case f := <-sn.got:
		send = f.GetSend()
	case <-time.After(10 * time.Second):
		t.Fatal("the client sent nothing")
	}
	if send == nil || len(send.GetPayload()) != 0 || len(send.GetSealed()) == 0 {
		t.Fatalf("want a sealed send with no plaintext, got %v", send)
	}
	sn.send(s, &pb.SessionFrame{Kind: &pb.SessionFrame_Ack{Ack: &pb.Ack{Id: send.GetId(), From: []byte(recipient), To: []byte(h.ID())}}})
	waitUntil(t, 10*time.Second, "the forged ack counted", func() bool {
		return testutil.ToFloat64(c.m.refused.WithLabelValues(refusedAck)) == 1
	})
	select {
	case err := <-done:
		t.Fatalf("Send returned on a forged ack: %v", err)
	default:
	}
	// The recipient can open what the client sealed, and its signed ack
	// completes the send.
	if got, _, err := protocol.OpenDirect(recipientKey, h.ID(), send.GetId(), send.GetSealed()); err != nil || string(got) != "hello" {
		t.Fatalf("the recipient opens %q, %v", got, err)
	}
	signed, err := protocol.SignAck(recipientKey, h.ID(), send.GetId())
	if err != nil {
		t.Fatal(err)
	}
	sn.send(s, &pb.SessionFrame{Kind: &pb.SessionFrame_Ack{Ack: &pb.Ack{Id: send.GetId(), From: []byte(recipient), To: []byte(h.ID()), Signed: signed}}})
	select {
	case err := <-done:
		if err != nil || string(msgID) != string(send.GetId()) {
			t.Fatalf("Send with a signed ack: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a signed ack did not complete the send")
	}
}

// TestClientRefusesForgedGroupMessages: a group message reaches the
// listener only when the group's home (by the client's ring) stamped it
// and its publisher signed it, and only for a group the client joined.
func TestClientRefusesForgedGroupMessages(t *testing.T) {
	mn := newMocknet(t)
	sn := newFake(t, mn, func() *pb.AttachResponse {
		return &pb.AttachResponse{Status: pb.AttachResponse_STATUS_ACCEPT, KeepaliveMs: 50}
	})
	homeKey, home := edKey(t)
	attackerKey, _ := edKey(t)
	r, err := ring.New([]ring.Member{{ID: home.String(), Weight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	var rings ring.Published
	rings.Publish(r)
	reg := prometheus.NewRegistry()
	c, _ := startClientOnRing(t, mn, &directory.Snapshot{}, &rings, []peer.AddrInfo{{ID: sn.h.ID()}}, WithRegisterer(reg))
	if err := c.Join("g"); err != nil {
		t.Fatal(err)
	}
	l := c.Listen()
	defer l.Close()
	waitUntil(t, 10*time.Second, "attached", func() bool { _, ok := c.Attachment(); return ok })
	s := sn.session()

	pubKey, publisher := edKey(t)
	msg := func(group string, seq uint64, stamper crypto.PrivKey) *pb.SessionFrame {
		id := protocol.NewMessageID()
		publish, err := protocol.SignPublish(pubKey, group, id, []byte(fmt.Sprint("m", seq)))
		if err != nil {
			t.Fatal(err)
		}
		st, err := protocol.Stamp(stamper, group, 1, seq, publish)
		if err != nil {
			t.Fatal(err)
		}
		return &pb.SessionFrame{Kind: &pb.SessionFrame_GroupMessage{GroupMessage: &pb.GroupMessage{
			Group: group, Epoch: 1, Seq: seq, From: []byte(publisher), Id: id, Publish: publish, Stamp: st}}}
	}
	sn.send(s, msg("g", 1, attackerKey)) // numbered by a supernode that is not the home
	sn.send(s, msg("other", 2, homeKey)) // a group this client never joined
	sn.send(s, msg("g", 3, homeKey))     // genuine
	in := <-l.C
	if in.Kind != KindGroup || in.Seq != 3 || string(in.Payload) != "m3" || in.From != publisher {
		t.Fatalf("the listener got %+v, want only the genuine message 3", in)
	}
	// The same publish numbered again (a supernode renumbering a genuine
	// message) is delivered once.
	again := in
	gm := (&pb.GroupMessage{Group: "g", Epoch: 1, Seq: 4, From: []byte(publisher), Id: again.ID})
	publish, err := protocol.SignPublish(pubKey, "g", again.ID, again.Payload)
	if err != nil {
		t.Fatal(err)
	}
	gm.Publish = publish
	if gm.Stamp, err = protocol.Stamp(homeKey, "g", 1, 4, publish); err != nil {
		t.Fatal(err)
	}
	sn.send(s, &pb.SessionFrame{Kind: &pb.SessionFrame_GroupMessage{GroupMessage: gm}})
	sn.send(s, msg("g", 5, homeKey)) // a later genuine message
	if next := <-l.C; next.Seq != 5 {
		t.Fatalf("the listener got %+v, want message 5 (the renumbered copy dropped)", next)
	}
	if got := testutil.ToFloat64(c.m.refused.WithLabelValues(refusedGroup)); got != 1 {
		t.Fatalf("%v forged group messages counted, want 1", got)
	}
	if got := testutil.ToFloat64(c.m.refused.WithLabelValues(refusedNotMember)); got != 1 {
		t.Fatalf("%v messages for a group not joined counted, want 1", got)
	}
}

// TestClientResumesItsGroups: a client restored with a group's position
// (a restarted daemon) joins it on its session with resume from that
// position; a group message delivered advances the position; the home's
// Resumed notice with messages missed reaches listeners as a gap for the
// group, never silence.
func TestClientResumesItsGroups(t *testing.T) {
	mn := newMocknet(t)
	sn := newFake(t, mn, func() *pb.AttachResponse {
		return &pb.AttachResponse{Status: pb.AttachResponse_STATUS_ACCEPT, KeepaliveMs: 50}
	})
	homeKey, home := edKey(t)
	r, err := ring.New([]ring.Member{{ID: home.String(), Weight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	var rings ring.Published
	rings.Publish(r)
	h := edPeer(t, mn)
	if err := mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	c, err := New(h, staticDir{&directory.Snapshot{}}, &rings, Config{
		AnnounceInterval: 20 * time.Millisecond, RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond,
		ReturnInterval: time.Hour, AckTimeout: 10 * time.Second, Bootstrap: []peer.AddrInfo{{ID: sn.h.ID()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RestoreGroups([]GroupState{{Group: "bad\x00name"}}); err == nil {
		t.Fatal("a state with an invalid group name was restored")
	}
	if err := c.RestoreGroups([]GroupState{{Group: "g", Epoch: 5, Seq: 9}, {Group: "fresh"}}); err != nil {
		t.Fatal(err)
	}
	l := c.Listen()
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	ops := map[string]*pb.GroupOp{}
	for len(ops) < 2 {
		select {
		case f := <-sn.got:
			if op := f.GetGroupOp(); op != nil {
				ops[op.GetGroup()] = op
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("group ops on the session: %v, want joins of g and fresh", ops)
		}
	}
	if op := ops["g"]; !op.GetJoin() || !op.GetResume() || op.GetResumeEpoch() != 5 || op.GetResumeSeq() != 9 {
		t.Fatalf("join of g: %v, want resume from (5, 9)", op)
	}
	if op := ops["fresh"]; !op.GetJoin() || op.GetResume() {
		t.Fatalf("join of fresh: %v, want a join without resume (nothing delivered yet)", op)
	}
	s := sn.session()
	pubKey, publisher := edKey(t)
	id := protocol.NewMessageID()
	publish, err := protocol.SignPublish(pubKey, "g", id, []byte("m10"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := protocol.Stamp(homeKey, "g", 5, 10, publish)
	if err != nil {
		t.Fatal(err)
	}
	sn.send(s, &pb.SessionFrame{Kind: &pb.SessionFrame_GroupMessage{GroupMessage: &pb.GroupMessage{
		Group: "g", Epoch: 5, Seq: 10, From: []byte(publisher), Id: id, Publish: publish, Stamp: st}}})
	sn.send(s, &pb.SessionFrame{Kind: &pb.SessionFrame_Resumed{Resumed: &pb.Resumed{Group: "g", Epoch: 5, Seq: 10, Missed: 3}}})
	if in := <-l.C; in.Kind != KindGroup || in.Seq != 10 {
		t.Fatalf("listener got %+v, want message 10", in)
	}
	if in := <-l.C; in.Kind != KindGap || in.Group != "g" || in.Dropped != 3 {
		t.Fatalf("listener got %+v, want a gap of 3 in g", in)
	}
	want := []GroupState{{Group: "fresh"}, {Group: "g", Epoch: 5, Seq: 10}}
	if got := c.GroupStates(); !slices.Equal(got, want) {
		t.Fatalf("group states %v, want %v", got, want)
	}

	// The supernode tells the fresh join where it stands; the session then
	// ends before any message of fresh: the next session resumes fresh from
	// there, so that what was published meanwhile is replayed.
	sn.send(s, &pb.SessionFrame{Kind: &pb.SessionFrame_Resumed{Resumed: &pb.Resumed{Group: "fresh", Epoch: 8, Seq: 4}}})
	id2 := protocol.NewMessageID()
	publish2, err := protocol.SignPublish(pubKey, "g", id2, []byte("m11"))
	if err != nil {
		t.Fatal(err)
	}
	st2, err := protocol.Stamp(homeKey, "g", 5, 11, publish2)
	if err != nil {
		t.Fatal(err)
	}
	sn.send(s, &pb.SessionFrame{Kind: &pb.SessionFrame_GroupMessage{GroupMessage: &pb.GroupMessage{
		Group: "g", Epoch: 5, Seq: 11, From: []byte(publisher), Id: id2, Publish: publish2, Stamp: st2}}})
	if in := <-l.C; in.Kind != KindGroup || in.Seq != 11 {
		t.Fatalf("listener got %+v, want message 11", in) // so the notice before it was read
	}
	if got := c.GroupStates(); !slices.Equal(got, []GroupState{{Group: "fresh"}, {Group: "g", Epoch: 5, Seq: 11}}) {
		t.Fatalf("group states %v: the notice is where a resume begins, not a position", got)
	}
	// A join this session takes that is never told where it starts (the
	// supernode had no position of the group): the next session asks for
	// the home's whole log (resume from zero) rather than joining afresh
	// where the next supernode stands (groupsim seed 2020).
	if err := c.Join("late"); err != nil {
		t.Fatal(err)
	}
	for op := (*pb.GroupOp)(nil); op.GetGroup() != "late"; {
		select {
		case f := <-sn.got:
			op = f.GetGroupOp()
		case <-time.After(10 * time.Second):
			t.Fatal("no join of late on the session")
		}
	}
	s.Reset()
	next := map[string]*pb.GroupOp{}
	for next["fresh"] == nil || next["late"] == nil {
		select {
		case f := <-sn.got:
			if op := f.GetGroupOp(); op != nil {
				next[op.GetGroup()] = op
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("joins on the next session: %v, want fresh and late", next)
		}
	}
	if op := next["fresh"]; !op.GetJoin() || !op.GetResume() || op.GetResumeEpoch() != 8 || op.GetResumeSeq() != 4 {
		t.Fatalf("join of fresh on the next session: %v, want resume from (8, 4)", op)
	}
	if op := next["late"]; !op.GetJoin() || !op.GetResume() || op.GetResumeEpoch() != 0 || op.GetResumeSeq() != 0 {
		t.Fatalf("join of late on the next session: %v, want resume from (0, 0): the whole log", op)
	}
}

// TestSendStoredAndOverQuota: a STORED answer (the recipient's home
// cluster stored the message) completes a Send as Stored, and an
// OVER_QUOTA answer fails it with ErrOverQuota at once, not retried (with
// a 10 s ack timeout, a retry would keep Send waiting for seconds).
func TestSendStoredAndOverQuota(t *testing.T) {
	mn := newMocknet(t)
	sn := newFake(t, mn, func() *pb.AttachResponse {
		return &pb.AttachResponse{Status: pb.AttachResponse_STATUS_ACCEPT, KeepaliveMs: 50}
	})
	c, _ := startClient(t, mn, &directory.Snapshot{}, []peer.AddrInfo{{ID: sn.h.ID()}})
	waitUntil(t, 10*time.Second, "attached", func() bool { _, ok := c.Attachment(); return ok })
	s := sn.session()
	_, recipient := edKey(t)
	for _, tc := range []struct {
		name    string
		status  pb.Result_Status
		stored  bool
		wantErr error
	}{
		{"stored", pb.Result_STATUS_STORED, true, nil},
		{"over quota", pb.Result_STATUS_OVER_QUOTA, false, ErrOverQuota},
	} {
		t.Run(tc.name, func(t *testing.T) {
			type answer struct {
				res SendResult
				err error
			}
			done := make(chan answer, 1)
			go func() {
				res, err := c.Send(context.Background(), recipient, []byte("for later"))
				done <- answer{res, err}
			}()
			var send *pb.DirectMessage
			for send == nil {
				select {
				case f := <-sn.got:
					send = f.GetSend()
				case <-time.After(10 * time.Second):
					t.Fatal("the client sent nothing")
				}
			}
			sn.send(s, &pb.SessionFrame{Kind: &pb.SessionFrame_Result{Result: &pb.Result{Id: send.GetId(), Status: tc.status, Detail: "kept up to 1h0m0s"}}})
			select {
			case a := <-done:
				if !errors.Is(a.err, tc.wantErr) || tc.wantErr == nil && a.err != nil {
					t.Fatalf("Send = %v, want %v", a.err, tc.wantErr)
				}
				if a.res.Stored != tc.stored || string(a.res.ID) != string(send.GetId()) {
					t.Fatalf("Send = %+v, want stored %v for id %x", a.res, tc.stored, send.GetId())
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Send did not return on the answer (retried?)")
			}
		})
	}
}
