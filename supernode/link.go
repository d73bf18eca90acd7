package supernode

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/protocol"
)

// linkQueue bounds the frames waiting on one supernode-to-supernode link;
// past it frames are dropped and counted (the sender's retries and acks
// recover direct messages; group messages report a gap).
const linkQueue = 4096

// link is the outbound half of a supernode-to-supernode connection: one
// long-lived RelayID stream written by one goroutine from a bounded queue,
// so a slow peer never blocks the caller.
type link struct {
	peer  peer.ID
	q     chan outFrame
	done  chan struct{}
	once  sync.Once
	sent  atomic.Uint64
	drops atomic.Uint64
}

// outFrame is a queued frame; group marks a GroupMessage, whose writes
// are counted separately (the wire count the batching is judged by).
type outFrame struct {
	b     []byte
	group bool
}

// links owns the outbound links of a supernode.
type links struct {
	h   host.Host
	log *slog.Logger
	now func() time.Time
	// failed is told when frames to a peer are lost (dial or write
	// failure), so cached routes through it are dropped.
	failed func(peer.ID)

	mu     sync.Mutex
	m      map[peer.ID]*link
	closed bool
	wg     sync.WaitGroup

	// framesTo counts frames written per destination, for tests and
	// metrics (labels are never peer IDs; tests read it directly).
	framesMu sync.Mutex
	framesTo map[peer.ID]uint64
	groupTo  map[peer.ID]uint64
}

func newLinks(h host.Host, log *slog.Logger, now func() time.Time) *links {
	return &links{h: h, log: log, now: now, m: make(map[peer.ID]*link), framesTo: make(map[peer.ID]uint64), groupTo: make(map[peer.ID]uint64)}
}

// send queues an encoded RelayFrame (length-prefixed) for p. It never
// blocks; it returns false when the link's queue is full or links are
// closed. frame is shared: it must not be modified afterwards.
func (ls *links) send(p peer.ID, frame []byte) bool { return ls.enqueue(p, outFrame{b: frame}) }

// sendGroup is send for a GroupMessage frame.
func (ls *links) sendGroup(p peer.ID, frame []byte) bool {
	return ls.enqueue(p, outFrame{b: frame, group: true})
}

func (ls *links) enqueue(p peer.ID, frame outFrame) bool {
	ls.mu.Lock()
	if ls.closed {
		ls.mu.Unlock()
		return false
	}
	l := ls.m[p]
	if l == nil {
		l = &link{peer: p, q: make(chan outFrame, linkQueue), done: make(chan struct{})}
		ls.m[p] = l
		ls.wg.Add(1)
		go ls.run(l)
	}
	ls.mu.Unlock()
	select {
	case l.q <- frame:
		return true
	default:
		l.drops.Add(1)
		return false
	}
}

// run writes l's queue to a stream, opening it (again) as needed. A write
// error drops the stream; the frame that failed is lost (callers recover).
// The goroutine ends when the link has been idle for a while or on close.
func (ls *links) run(l *link) {
	defer ls.wg.Done()
	var s network.Stream
	defer func() {
		if s != nil {
			s.Close()
		}
	}()
	idle := time.NewTimer(time.Minute)
	defer idle.Stop()
	for {
		var f outFrame
		select {
		case f = <-l.q:
		case <-l.done:
			return
		case <-idle.C:
			ls.mu.Lock()
			if len(l.q) == 0 {
				delete(ls.m, l.peer)
				ls.mu.Unlock()
				return
			}
			ls.mu.Unlock()
			idle.Reset(time.Minute)
			continue
		}
		idle.Reset(time.Minute)
		if s == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var err error
			s, err = ls.h.NewStream(ctx, l.peer, protocol.RelayID)
			cancel()
			if err != nil {
				ls.log.Debug("relay link", "peer", l.peer.ShortString(), "err", err)
				l.drops.Add(1)
				s = nil
				if ls.failed != nil {
					ls.failed(l.peer)
				}
				continue
			}
		}
		_ = s.SetWriteDeadline(ls.now().Add(10 * time.Second))
		if _, err := s.Write(f.b); err != nil {
			ls.log.Debug("relay write", "peer", l.peer.ShortString(), "err", err)
			l.drops.Add(1)
			s.Reset()
			s = nil
			if ls.failed != nil {
				ls.failed(l.peer)
			}
			continue
		}
		l.sent.Add(1)
		ls.framesMu.Lock()
		ls.framesTo[l.peer]++
		if f.group {
			ls.groupTo[l.peer]++
		}
		ls.framesMu.Unlock()
	}
}

// close stops every link and waits for their goroutines.
func (ls *links) close() {
	ls.mu.Lock()
	if ls.closed {
		ls.mu.Unlock()
		return
	}
	ls.closed = true
	for _, l := range ls.m {
		l.once.Do(func() { close(l.done) })
	}
	ls.mu.Unlock()
	ls.wg.Wait()
}

// groupFramesSent returns how many GroupMessage frames were written to p.
func (ls *links) groupFramesSent(p peer.ID) uint64 {
	ls.framesMu.Lock()
	defer ls.framesMu.Unlock()
	return ls.groupTo[p]
}

// framesSent returns how many frames were written to p.
func (ls *links) framesSent(p peer.ID) uint64 {
	ls.framesMu.Lock()
	defer ls.framesMu.Unlock()
	return ls.framesTo[p]
}
