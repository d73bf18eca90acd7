package supernode

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"

	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// relayInbox collects the relay frames a raw host (a hostile or test
// supernode) receives on its inbound relay streams.
func relayInbox(t testing.TB, h host.Host) <-chan *pb.RelayFrame {
	t.Helper()
	ch := make(chan *pb.RelayFrame, 64)
	h.SetStreamHandler(protocol.RelayID, func(s network.Stream) {
		defer s.Reset()
		fr := protocol.NewFrameReader(s, protocol.MaxRelayFrame)
		for {
			f := &pb.RelayFrame{}
			_ = s.SetReadDeadline(time.Now().Add(time.Minute))
			if err := fr.Read(f); err != nil {
				return
			}
			select {
			case ch <- f:
			default:
			}
		}
	})
	return ch
}

// relayStream opens a relay stream from h to p, reset at cleanup.
func relayStream(t testing.TB, h host.Host, p host.Host) network.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	s, err := h.NewStream(ctx, p.ID(), protocol.RelayID)
	if err != nil {
		t.Fatalf("open relay stream: %v", err)
	}
	t.Cleanup(func() { _ = s.Reset() })
	return s
}

// TestRelayedOversizeFramesNotForwarded: a directory supernode relays a
// 200 KiB group message and a 200 KiB direct message (both within
// MaxRelayFrame, both far over the MaxSessionFrame a client reads). On the
// old code the group message was forwarded and the member's session ended
// ("oversize: frame too large: 204869 bytes, limit 66560"), for every
// member it was fanned out to. Now both are dropped and counted, the sender
// of the direct message is told INVALID through its supernode, and the
// client's session stays up.
func TestRelayedOversizeFramesNotForwarded(t *testing.T) {
	n := newTestNet(t)
	var rp ring.Published
	var sns peerSet
	hostile := n.host(t)
	inbox := relayInbox(t, hostile)
	sn := newSupernode(t, n, supernodeConfig{capacity: 4, adm: AdmissionConfig{Keepalive: 10 * time.Second}, router: &RouterConfig{Ring: rp.Load, IsSupernode: sns.has}})
	sns.add(hostile.ID())
	// The hostile supernode is the group's home (the only ring member), so
	// its messages pass the home and stamp checks and reach the size check.
	rp.Publish(newRing(t, hostile.ID()))
	ch := n.host(t)
	c := mustAccept(t, ch, sn.h.ID(), 1)
	c.send(groupOpFrame(t, ch, sn.h.ID(), "g", true))
	waitFor(t, "the client to join g", func() bool {
		sn.r.mu.Lock()
		defer sn.r.mu.Unlock()
		return sn.r.local["g"] != nil
	})

	s := relayStream(t, hostile, sn.h)
	sender := newPeerID(t)
	big := make([]byte, 200<<10)
	stamped := func(seq uint64, payload []byte) *pb.GroupMessage {
		id := protocol.NewMessageID()
		publish, err := protocol.SignPublish(keyOf(t, sender), "g", id, payload)
		if err != nil {
			t.Fatal(err)
		}
		st, err := protocol.Stamp(hostile.Peerstore().PrivKey(hostile.ID()), "g", 1, seq, publish)
		if err != nil {
			t.Fatal(err)
		}
		return &pb.GroupMessage{Group: "g", Epoch: 1, Seq: seq, From: []byte(sender), Id: id, Publish: publish, Stamp: st}
	}
	frames := []*pb.RelayFrame{
		{Kind: &pb.RelayFrame_GroupMessage{GroupMessage: stamped(1, big)}},
		{Kind: &pb.RelayFrame_Deliver{Deliver: &pb.DirectMessage{Id: make([]byte, 16), From: []byte(sender), To: []byte(ch.ID()), Payload: big, Origin: []byte(hostile.ID())}}},
		// A small group message after them is still delivered.
		{Kind: &pb.RelayFrame_GroupMessage{GroupMessage: stamped(2, []byte("hi"))}},
	}
	for _, f := range frames {
		if err := protocol.WriteFrame(s, f); err != nil {
			t.Fatalf("write relay frame: %v", err)
		}
	}
	var f pb.SessionFrame
	if err := c.read(&f); err != nil {
		t.Fatalf("client session after oversize relayed frames: %v", err)
	}
	if gm := f.GetGroupMessage(); gm.GetSeq() != 2 {
		t.Fatalf("client got %v, want the small group message (seq 2) only", &f)
	}
	if pong := c.ping(7); pong.GetPong().GetSeq() != 7 {
		t.Fatalf("ping answered with %v", pong)
	}
	st := sn.r.Stats()
	if st.OversizeGroup.Load() != 1 || st.OversizeDirect.Load() != 1 {
		t.Fatalf("oversize counted: group %d, direct %d; want 1, 1", st.OversizeGroup.Load(), st.OversizeDirect.Load())
	}
	// The hostile supernode is also the client's home cluster: presence
	// and membership frames come to it too. Look for the result.
	deadline := time.After(waitTimeout)
	for {
		select {
		case rf := <-inbox:
			pr := rf.GetPublishResult()
			if pr == nil {
				continue
			}
			if string(pr.GetTo()) != string(sender) || pr.GetResult().GetStatus() != pb.Result_STATUS_INVALID {
				t.Fatalf("sender's supernode got %v, want an INVALID result for the sender", rf)
			}
			return
		case <-deadline:
			t.Fatal("the sender's supernode was not told")
		}
	}
}

// TestHomeRefusesOversizePublish: a publish relayed to a group home by
// another supernode with a payload over MaxPayload is refused INVALID
// before it is numbered, and never sent to the members' supernodes.
func TestHomeRefusesOversizePublish(t *testing.T) {
	n := newTestNet(t)
	var rp ring.Published
	var sns peerSet
	hostile := n.host(t)
	inbox := relayInbox(t, hostile)
	sn := newSupernode(t, n, supernodeConfig{capacity: 4, router: &RouterConfig{Ring: rp.Load, IsSupernode: sns.has}})
	sns.add(hostile.ID())
	rp.Publish(newRing(t, sn.h.ID()))
	from := newPeerID(t)
	s := relayStream(t, hostile, sn.h)
	pub := &pb.GroupPublish{Group: "g", Id: make([]byte, 16), Payload: make([]byte, 200<<10), From: []byte(from), Origin: []byte(hostile.ID())}
	if err := protocol.WriteFrame(s, &pb.RelayFrame{Kind: &pb.RelayFrame_Publish{Publish: pub}}); err != nil {
		t.Fatal(err)
	}
	select {
	case rf := <-inbox:
		if rf.GetPublishResult().GetResult().GetStatus() != pb.Result_STATUS_INVALID {
			t.Fatalf("publisher's supernode got %v, want INVALID", rf)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no result for the oversize publish")
	}
	if got := sn.r.Stats().GroupPublishes.Load(); got != 0 {
		t.Fatalf("%d publishes numbered, want 0", got)
	}
}
