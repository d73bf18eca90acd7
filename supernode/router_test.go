package supernode

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	p2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// TestRelayAndLookupOnlyFromSupernodes: the supernode-to-supernode
// protocols serve live supernodes only (RouterConfig.IsSupernode). A relay
// stream from anyone else is reset before a frame is read, so a forged
// presence record is never applied; a lookup from anyone else is reset
// unanswered. From a supernode, the same streams are served.
func TestRelayAndLookupOnlyFromSupernodes(t *testing.T) {
	for _, tc := range []struct {
		name          string
		pid           string
		fromSupernode bool
	}{
		{"relay from a supernode is served", protocol.RelayID, true},
		{"relay from a non-supernode is refused", protocol.RelayID, false},
		{"lookup from a supernode is served", protocol.LookupID, true},
		{"lookup from a non-supernode is refused", protocol.LookupID, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNet(t)
			other := n.host(t)    // a live supernode
			stranger := n.host(t) // an ordinary peer
			var rp ring.Published
			sn := newSupernode(t, n, supernodeConfig{router: &RouterConfig{
				Ring:        rp.Load,
				IsSupernode: func(p peer.ID) bool { return p == other.ID() },
			}})
			rp.Publish(newRing(t, sn.h.ID()))
			var from host.Host = stranger
			if tc.fromSupernode {
				from = other
			}
			client := newPeerID(t)

			switch tc.pid {
			case protocol.RelayID:
				// The sender says the client is attached to it.
				f := &pb.RelayFrame{Kind: &pb.RelayFrame_Presence{Presence: presenceBatch(client, from.ID(), 1, true)}}
				if tc.fromSupernode {
					if err := exchange(t, from, sn.h.ID(), protocol.RelayID, f, 0, nil); err != nil {
						t.Fatalf("relay stream from a supernode: %v", err)
					}
					waitFor(t, "the presence record to be applied", func() bool {
						p, ok := presenceOf(sn.r, client)
						return ok && p.location == from.ID() && p.seq == 1
					})
					return
				}
				// The router never writes on a relay stream: the read ends
				// only with the reset.
				err := exchange(t, from, sn.h.ID(), protocol.RelayID, f, protocol.MaxRelayFrame, &pb.RelayFrame{})
				if !errors.Is(err, network.ErrReset) {
					t.Fatalf("relay stream from a non-supernode ended with %v, want a reset", err)
				}
				if p, ok := presenceOf(sn.r, client); ok {
					t.Fatalf("a non-supernode's presence record was applied: %+v", p)
				}
			case protocol.LookupID:
				sn.r.applyPresence(other.ID(), presenceBatch(client, other.ID(), 1, true))
				var resp pb.LookupResponse
				err := exchange(t, from, sn.h.ID(), protocol.LookupID, &pb.LookupRequest{Client: []byte(client)}, protocol.MaxLookupFrame, &resp)
				if !tc.fromSupernode {
					if !errors.Is(err, network.ErrReset) {
						t.Fatalf("lookup from a non-supernode: answer %v, error %v; want a reset", &resp, err)
					}
					return
				}
				if err != nil {
					t.Fatalf("lookup from a supernode: %v", err)
				}
				if !resp.GetFound() || peer.ID(resp.GetLocation()) != other.ID() {
					t.Fatalf("lookup answered found %v at %s, want found at %s", resp.GetFound(), peer.ID(resp.GetLocation()), other.ID())
				}
			}
		})
	}
}

// exchange opens a pid stream from h to p, writes req and, unless resp is
// nil, reads one frame of at most limit bytes into it. It returns the first
// error: a stream reset by the remote shows at the protocol negotiation,
// the write or the read, depending on how far the opener got first.
func exchange(t testing.TB, h host.Host, p peer.ID, pid p2pprotocol.ID, req proto.Message, limit int, resp proto.Message) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	s, err := h.NewStream(ctx, p, pid)
	if err != nil {
		return err
	}
	t.Cleanup(func() { _ = s.Reset() })
	if err := protocol.WriteFrame(s, req); err != nil {
		return err
	}
	if resp == nil {
		return nil
	}
	return readFrame(s, limit, resp)
}

// TestLateDetachOfOlderSessionKeepsNewerGroups: Router.Detached for a
// client's older session, arriving after its newer session's Attached,
// must leave the newer session alone -- its presence (see
// TestPresenceOrderedBySessionSeq) and the groups it joined. The Admission
// delivers such a late Detached when a reattach takes over a lingering
// session: the old session's goroutine decides it is current under a.mu
// and calls the handler after releasing the lock, so its Detached can
// reach the router after the new session's Attached and frames.
//
// BUG: Router.Detached checks the seq for r.sessions (and the presence
// record ignores the older seq), but drops r.joined[client] and removes the
// client from every local fanout group unconditionally, and sends the
// group homes a leave: the client of the newer session silently stops
// getting group messages, and refresh never re-joins it (r.joined is gone).
func TestLateDetachOfOlderSessionKeepsNewerGroups(t *testing.T) {
	n := newTestNet(t)
	sn := newSupernode(t, n, supernodeConfig{capacity: 2, adm: AdmissionConfig{Keepalive: 10 * time.Second}, router: &RouterConfig{}})
	ch := n.host(t)
	c := mustAccept(t, ch, sn.h.ID(), 2)
	c.send(groupOpFrame(t, ch, sn.h.ID(), "g", true))
	joined := func() (bool, int) {
		sn.r.mu.Lock()
		defer sn.r.mu.Unlock()
		members := 0
		if lg := sn.r.local["g"]; lg != nil {
			members = lg.Len()
		}
		return sn.r.core.JoinedForTest(string(ch.ID()), "g"), members
	}
	waitFor(t, "the client to join group g", func() bool { j, m := joined(); return j && m == 1 })

	sn.r.Detached(ch.ID(), 1) // the older session's late notice

	sn.r.mu.Lock()
	seq := sn.r.sessions[ch.ID()].seq
	sn.r.mu.Unlock()
	if seq != 2 {
		t.Errorf("router's session seq %d after the older session's Detached, want 2", seq)
	}
	if j, m := joined(); !j || m != 1 {
		t.Errorf("after the older session's Detached: joined g %v, local members %d; want true, 1", j, m)
	}
}
