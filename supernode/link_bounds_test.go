package supernode

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// fakeMemory is a memoryScope with a limit, recording what is held.
type fakeMemory struct {
	mu    sync.Mutex
	limit int
	held  int
	peak  int
}

func (m *fakeMemory) reserve(_ peer.ID, n int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held+n > m.limit {
		return errors.New("fake resource manager: memory limit")
	}
	m.held += n
	m.peak = max(m.peak, m.held)
	return nil
}

func (m *fakeMemory) release(_ peer.ID, n int) {
	m.mu.Lock()
	m.held -= n
	m.mu.Unlock()
}

func (m *fakeMemory) get() (held, peak int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.held, m.peak
}

// TestLinkQueueBoundedInBytes: a directory supernode floods another with
// Deliver frames of 60 KiB for a recipient that is not attached there, and
// never reads the relay stream the nacks (each carrying the whole message)
// come back on. On the old code the link queue was bounded only in frames
// (4,096): 300 frames here queued 298 nacks, 18.3 MB (heap +18 MB), and 1,000
// frames of 200 KiB took a supernode from 37 MB to 306 MB; and Router.Close
// never returned while the writer was blocked. Now the queue stays within
// its byte bound, the rest is dropped and counted by reason, the memory is
// reserved from (and given back to) the resource manager, and Close ends
// the blocked write.
func TestLinkQueueBoundedInBytes(t *testing.T) {
	for _, tc := range []struct {
		name              string
		perLink, allLinks int // 0: the defaults
		memLimit          int
		reason            func(*RouterStats) uint64
		bound             int
	}{
		{"per-link byte bound", 0, 0, 1 << 30, func(s *RouterStats) uint64 { return s.LinkQueueBytes.Load() }, linkQueueBytes},
		{"bound over all links", 0, 4 << 20, 1 << 30, func(s *RouterStats) uint64 { return s.LinksTotalBytes.Load() }, 4 << 20},
		{"resource manager refuses", 0, 0, 3 << 20, func(s *RouterStats) uint64 { return s.LinkMemory.Load() }, 3 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNet(t)
			var rp ring.Published
			var sns peerSet
			hostile := n.host(t)
			stall := make(chan struct{})
			hostile.SetStreamHandler(protocol.RelayID, func(s network.Stream) {
				<-stall // never reads
				s.Reset()
			})
			sn := newSupernode(t, n, supernodeConfig{capacity: 4, router: &RouterConfig{Ring: rp.Load, IsSupernode: sns.has}})
			t.Cleanup(func() { close(stall) }) // before the router's Close: Close must not need it
			sns.add(hostile.ID())
			rp.Publish(newRing(t, sn.h.ID()))
			mem := &fakeMemory{limit: tc.memLimit}
			sn.r.links.mu.Lock()
			sn.r.links.mem = mem
			if tc.allLinks > 0 {
				sn.r.links.allLinks = tc.allLinks
			}
			sn.r.links.mu.Unlock()

			s := relayStream(t, hostile, sn.h)
			absent := newPeerID(t)
			const frames = 300
			payload := make([]byte, 60<<10)
			for range frames {
				m := &pb.DirectMessage{Id: protocol.NewMessageID(), From: []byte(absent), To: []byte(absent), Payload: payload, Origin: []byte(hostile.ID())}
				if err := protocol.WriteFrame(s, &pb.RelayFrame{Kind: &pb.RelayFrame_Deliver{Deliver: m}}); err != nil {
					t.Fatalf("write: %v", err)
				}
			}
			st := sn.r.Stats()
			waitFor(t, "every nack to be queued or dropped", func() bool {
				q, _, _ := sn.r.links.queued(hostile.ID())
				return uint64(q)+tc.reason(st)+sn.r.FramesSentForTest(hostile.ID()) == frames
			})
			q, b, total := sn.r.links.queued(hostile.ID())
			held, peak := mem.get()
			t.Logf("%d frames, %d bytes queued (all links %d); %d dropped; memory reserved %d (peak %d)", q, b, total, tc.reason(st), held, peak)
			if b > tc.bound || total > tc.bound {
				t.Fatalf("%d bytes queued on the link, %d on all links; bound %d", b, total, tc.bound)
			}
			if tc.reason(st) == 0 {
				t.Fatal("no frame dropped for the bound")
			}
			if held < b || peak > tc.memLimit {
				t.Fatalf("reserved %d bytes (peak %d) for %d queued, limit %d", held, peak, b, tc.memLimit)
			}
			sn.r.Close()
			if held, _ := mem.get(); held != 0 {
				t.Fatalf("%d bytes still reserved after Close", held)
			}
			if _, _, total := sn.r.links.queued(hostile.ID()); total != 0 {
				t.Fatalf("%d bytes accounted as queued after Close", total)
			}
		})
	}
}

// TestLinkCloseEndsBlockedWrite: Router.Close returns while a link's
// writer is blocked on a peer that never reads (mocknet streams have no
// write deadline; a real transport would block until its deadline).
func TestLinkCloseEndsBlockedWrite(t *testing.T) {
	n := newTestNet(t)
	other := n.host(t)
	stall := make(chan struct{})
	other.SetStreamHandler(protocol.RelayID, func(s network.Stream) { <-stall; s.Reset() })
	t.Cleanup(func() { close(stall) })
	sn := newSupernode(t, n, supernodeConfig{capacity: 1, router: &RouterConfig{}})
	big := make([]byte, 256<<10)
	for range 8 {
		sn.r.links.send(other.ID(), big)
	}
	waitFor(t, "the writer to block", func() bool { q, _, _ := sn.r.links.queued(other.ID()); return q < 8 && q > 0 })
	done := make(chan struct{})
	go func() { sn.r.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Fatal("Router.Close blocked on a link writer")
	}
}

// TestLinkRewritesOnDeadStream: a frame written into a link's stream
// whose connection died unnoticed (the peer closed it: a partition, or a
// restart) goes again on a new stream. Lost, it was the member's resume
// that kept a member held after a partition healed, while the home
// numbered on (TestScenarios/partition, 75/85 deliveries).
func TestLinkRewritesOnDeadStream(t *testing.T) {
	n := newTestNet(t)
	other := n.host(t)
	got := make(chan string, 16)
	other.SetStreamHandler(protocol.RelayID, func(s network.Stream) {
		defer s.Reset()
		buf := make([]byte, 64)
		for {
			k, err := s.Read(buf)
			if err != nil {
				return
			}
			got <- string(buf[:k])
		}
	})
	sn := newSupernode(t, n, supernodeConfig{capacity: 1, router: &RouterConfig{}})
	want := func(frame string) {
		t.Helper()
		select {
		case g := <-got:
			if g != frame {
				t.Fatalf("peer read %q, want %q", g, frame)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("frame %q never arrived", frame)
		}
	}
	sn.r.links.send(other.ID(), []byte("first"))
	want("first")
	// The peer drops the connection; the link still holds its stream.
	if err := other.Network().ClosePeer(sn.h.ID()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the connection to close", func() bool { return sn.h.Network().Connectedness(other.ID()) != network.Connected })
	sn.r.links.send(other.ID(), []byte("second"))
	want("second")
	if sn.r.stats.LinkRewritten.Load() != 1 || sn.r.stats.LinkFailed.Load() != 0 {
		t.Fatalf("rewritten %d, failed %d; want 1 and 0", sn.r.stats.LinkRewritten.Load(), sn.r.stats.LinkFailed.Load())
	}
}
