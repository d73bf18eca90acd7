package supernode

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// stallAttach opens an attach stream from h to sn that sends nothing, or
// one byte (the start of a frame length), and then stalls. The stream is
// reset at cleanup.
func stallAttach(t testing.TB, h host.Host, sn peer.ID, oneByte bool) network.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	s, err := h.NewStream(ctx, sn, protocol.AttachID)
	if err != nil {
		t.Fatalf("open attach stream: %v", err)
	}
	t.Cleanup(func() { _ = s.Reset() })
	if oneByte {
		if _, err := s.Write([]byte{0x05}); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	return s
}

// TestAttachSlowlorisLeavesSlotsFree: streams that open an attach and
// never finish their AttachRequest hold no attached-peers slot. The attack
// measured on the old code: 3 identities × 4 streams sending nothing or one
// byte held all 10 slots of a supernode for the whole handshake timeout,
// and a legitimate client was answered BUSY 30 times out of 30. Now a slot
// is taken only after the request is read; each identity has at most
// MaxHandshakesPerPeer handshakes in progress (the rest answered BUSY at
// once and counted), and the legitimate client is accepted at once while
// the stalled streams still wait (their request timeout is a minute here).
func TestAttachSlowlorisLeavesSlotsFree(t *testing.T) {
	n := newTestNet(t)
	sn := newSupernode(t, n, supernodeConfig{capacity: 10, adm: AdmissionConfig{
		Keepalive: 10 * time.Second, Handshake: time.Minute, RequestTimeout: time.Minute,
	}})
	const identities, streams = 3, 4
	for range identities {
		h := n.host(t)
		for j := range streams {
			stallAttach(t, h, sn.h.ID(), j%2 == 1)
		}
	}
	perPeer := DefaultMaxHandshakesPerPeer
	waitFor(t, "the stalled streams to reach the handler", func() bool {
		st := sn.adm.Stats()
		return st.Handshaking == identities*perPeer && st.PeerHandshakes == identities*(streams-uint64(perPeer))
	})
	if u := sn.sems.Attached.InUse(); u != 0 {
		t.Fatalf("%d attached-peers slots held by streams that sent no request", u)
	}
	legit := n.host(t)
	busy := 0
	for seq := uint64(1); seq <= 30; seq++ {
		c, resp := attach(t, legit, sn.h.ID(), seq)
		if resp.GetStatus() != pb.AttachResponse_STATUS_ACCEPT {
			busy++
			continue
		}
		c.detach()
		waitFor(t, "the session to end", func() bool { return sn.adm.Load() == 0 })
	}
	if busy != 0 {
		t.Fatalf("legitimate client refused %d/30 times while stalled handshakes were in progress", busy)
	}
	if st := sn.adm.Stats(); st.Handshaking != identities*perPeer || st.Accepted != 30 {
		t.Fatalf("stats %+v: want the stalled handshakes still in progress and 30 sessions accepted", st)
	}
}

// TestAttachHandshakesBounded: past MaxHandshakes streams without a
// request, a new stream is answered BUSY at once (no goroutine or memory
// piles up), and counted; a stalled stream is reset at its request timeout
// (counted) and a client is accepted again.
func TestAttachHandshakesBounded(t *testing.T) {
	n := newTestNet(t)
	const maxHS = 4
	sn := newSupernode(t, n, supernodeConfig{capacity: 10, adm: AdmissionConfig{
		Keepalive: 10 * time.Second, Handshake: time.Minute, RequestTimeout: time.Minute, MaxHandshakes: maxHS,
	}})
	for range maxHS {
		stallAttach(t, n.host(t), sn.h.ID(), true)
	}
	waitFor(t, "the handshake bound to fill", func() bool { return sn.adm.Stats().Handshaking == maxHS })
	c, resp := attach(t, n.host(t), sn.h.ID(), 1)
	if resp.GetStatus() != pb.AttachResponse_STATUS_BUSY || resp.GetRetryAfterMs() == 0 {
		t.Fatalf("with %d handshakes in progress: %v (%q), want BUSY with a retry-after", maxHS, resp.GetStatus(), resp.GetReason())
	}
	_ = c.end()
	if st := sn.adm.Stats(); st.HandshakesFull != 1 || st.Handshaking != maxHS {
		t.Fatalf("stats %+v, want one refusal counted as handshakes full", st)
	}

	// A short request timeout: the stalled streams are reset and counted.
	n2 := newTestNet(t)
	sn2 := newSupernode(t, n2, supernodeConfig{capacity: 10, adm: AdmissionConfig{
		Keepalive: 10 * time.Second, RequestTimeout: 50 * time.Millisecond, MaxHandshakes: maxHS,
	}})
	for range maxHS {
		stallAttach(t, n2.host(t), sn2.h.ID(), false)
	}
	waitFor(t, "the stalled handshakes to time out", func() bool {
		st := sn2.adm.Stats()
		return st.RequestTimeouts == maxHS && st.Handshaking == 0
	})
	mustAccept(t, n2.host(t), sn2.h.ID(), 1)
}
