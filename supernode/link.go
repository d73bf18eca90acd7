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

// Link queue bounds. Frames past them are dropped and counted by reason
// (RouterStats.Link*); the sender's retries and acks recover direct
// messages, group members see a gap in the sequence numbers, presence and
// membership are re-sent every refresh.
const (
	// linkQueueFrames bounds the frames waiting on one link: enough for a
	// refresh of 4,096 presence or membership batches or a burst of small
	// messages.
	linkQueueFrames = 4096
	// linkQueueBytes bounds the bytes waiting on one link: 8 MiB is 32
	// relay frames of the largest size (MaxRelayFrame) or ~125 full
	// messages, more than a healthy link holds at any time (a 10 s write
	// deadline at even 1 MiB/s drains it), and it caps what one slow or
	// hostile peer that stops reading can make us hold. With only the
	// frame bound, 4,096 frames of 200 KiB let one peer hold 800 MiB.
	linkQueueBytes = 8 << 20
	// linksTotalBytes bounds the bytes waiting on all links together:
	// 8 stalled peers' worth. Past it every link drops, so a supernode
	// under attack from many identities keeps a fixed ceiling.
	linksTotalBytes = 64 << 20
	// linkReserveChunk is the step in which a link reserves its queued
	// bytes from the resource manager's scope of its peer (and so from
	// the system scope): reserving per frame would take the resource
	// manager's locks on every send.
	linkReserveChunk = 1 << 20
)

// link is the outbound half of a supernode-to-supernode connection: one
// long-lived RelayID stream written by one goroutine from a bounded queue,
// so a slow peer never blocks the caller.
type link struct {
	peer peer.ID
	q    chan outFrame
	done chan struct{}
	once sync.Once
	sent atomic.Uint64

	// Guarded by links.mu: frames and bytes queued or being written,
	// memory reserved for them, the stream being written (reset by close).
	frames, bytes, reserved int
	s                       network.Stream
}

// outFrame is a queued frame; group marks a GroupMessage, whose writes
// are counted separately (the wire count the batching is judged by).
type outFrame struct {
	b     []byte
	group bool
}

// memoryScope reserves and releases memory charged to a peer: the
// resource manager's peer scope in production.
type memoryScope interface {
	reserve(p peer.ID, n int) error
	release(p peer.ID, n int)
}

// rcmgrScope charges link queues to the host's resource manager.
type rcmgrScope struct{ rm network.ResourceManager }

func (r rcmgrScope) reserve(p peer.ID, n int) error {
	return r.rm.ViewPeer(p, func(s network.PeerScope) error { return s.ReserveMemory(n, network.ReservationPriorityMedium) })
}

func (r rcmgrScope) release(p peer.ID, n int) {
	_ = r.rm.ViewPeer(p, func(s network.PeerScope) error { s.ReleaseMemory(n); return nil })
}

// links owns the outbound links of a supernode.
type links struct {
	h     host.Host
	log   *slog.Logger
	now   func() time.Time
	stats *RouterStats
	mem   memoryScope
	// failed is told when frames to a peer are lost (dial or write
	// failure), so cached routes through it are dropped.
	failed func(peer.ID)
	// ctx ends pending dials at close.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	m        map[peer.ID]*link
	total    int // bytes queued on all links
	perLink  int // linkQueueBytes; lowered by tests
	allLinks int // linksTotalBytes; lowered by tests
	closed   bool
	// lostGroup are peers whose group frames are lost (tests: a link
	// that loses what a crash would).
	lostGroup map[peer.ID]bool
	wg        sync.WaitGroup

	// framesTo counts frames written per destination, for tests and
	// metrics (labels are never peer IDs; tests read it directly).
	framesMu sync.Mutex
	framesTo map[peer.ID]uint64
	groupTo  map[peer.ID]uint64
}

func newLinks(h host.Host, log *slog.Logger, now func() time.Time, stats *RouterStats) *links {
	ctx, cancel := context.WithCancel(context.Background())
	var mem memoryScope = rcmgrScope{&network.NullResourceManager{}}
	if rm := h.Network().ResourceManager(); rm != nil {
		mem = rcmgrScope{rm}
	}
	return &links{
		h: h, log: log, now: now, stats: stats, mem: mem, ctx: ctx, cancel: cancel,
		m: make(map[peer.ID]*link), perLink: linkQueueBytes, allLinks: linksTotalBytes,
		framesTo: make(map[peer.ID]uint64), groupTo: make(map[peer.ID]uint64),
	}
}

// send queues an encoded RelayFrame (length-prefixed) for p. It never
// blocks; it returns false when the frame was dropped (counted by reason):
// the link's queue is full in frames or bytes, all links are full, the
// resource manager refused the memory, or links are closed. frame is
// shared: it must not be modified afterwards.
func (ls *links) send(p peer.ID, frame []byte) bool { return ls.enqueue(p, outFrame{b: frame}) }

// sendGroup is send for a GroupMessage frame.
func (ls *links) sendGroup(p peer.ID, frame []byte) bool {
	ls.mu.Lock()
	lost := ls.lostGroup[p]
	ls.mu.Unlock()
	if lost {
		return true
	}
	return ls.enqueue(p, outFrame{b: frame, group: true})
}

// dropGroupFramesForTest makes every group frame for p vanish as if
// written: what a crash loses between numbering and the wire.
func (ls *links) dropGroupFramesForTest(p peer.ID) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.lostGroup == nil {
		ls.lostGroup = map[peer.ID]bool{}
	}
	ls.lostGroup[p] = true
}

func (ls *links) enqueue(p peer.ID, frame outFrame) bool {
	n := len(frame.b)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed {
		ls.stats.LinkClosed.Add(1)
		return false
	}
	l := ls.m[p]
	switch {
	case l != nil && l.frames >= linkQueueFrames:
		ls.stats.LinkQueueFrames.Add(1)
		return false
	case l != nil && l.bytes+n > ls.perLink, l == nil && n > ls.perLink:
		ls.stats.LinkQueueBytes.Add(1)
		return false
	case ls.total+n > ls.allLinks:
		ls.stats.LinksTotalBytes.Add(1)
		return false
	}
	if l == nil {
		l = &link{peer: p, q: make(chan outFrame, linkQueueFrames), done: make(chan struct{})}
		ls.m[p] = l
		ls.wg.Add(1)
		go ls.run(l)
	}
	if need := l.bytes + n - l.reserved; need > 0 {
		need = (need + linkReserveChunk - 1) / linkReserveChunk * linkReserveChunk
		if err := ls.mem.reserve(p, need); err != nil {
			ls.stats.LinkMemory.Add(1)
			return false
		}
		l.reserved += need
	}
	l.frames++
	l.bytes += n
	ls.total += n
	l.q <- frame // never blocks: l.frames ≤ linkQueueFrames = cap(l.q)
	return true
}

// doneLocked accounts for a frame that left l's queue (written or lost)
// and releases reserved memory beyond one spare chunk.
func (ls *links) doneLocked(l *link, n int) {
	l.frames--
	l.bytes -= n
	ls.total -= n
	keep := (l.bytes+linkReserveChunk-1)/linkReserveChunk*linkReserveChunk + linkReserveChunk
	if l.bytes == 0 {
		keep = 0
	}
	if l.reserved > keep {
		ls.mem.release(l.peer, l.reserved-keep)
		l.reserved = keep
	}
}

func (ls *links) done(l *link, n int) {
	ls.mu.Lock()
	ls.doneLocked(l, n)
	ls.mu.Unlock()
}

// run writes l's queue to a stream, opening it (again) as needed. A write
// error drops the stream; the frame that failed is lost (callers recover).
// The goroutine ends when the link has been idle for a while or on close;
// on close it discards what is queued and releases its memory.
func (ls *links) run(l *link) {
	defer ls.wg.Done()
	defer func() {
		ls.mu.Lock()
	drain:
		for {
			select {
			case f := <-l.q:
				ls.doneLocked(l, len(f.b))
			default:
				break drain
			}
		}
		if l.reserved > 0 {
			ls.mem.release(l.peer, l.reserved)
			l.reserved = 0
		}
		s := l.s
		l.s = nil
		ls.mu.Unlock()
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
			if l.frames == 0 {
				delete(ls.m, l.peer)
				ls.mu.Unlock()
				return
			}
			ls.mu.Unlock()
			idle.Reset(time.Minute)
			continue
		}
		idle.Reset(time.Minute)
		ok := ls.write(l, f)
		ls.done(l, len(f.b))
		if !ok {
			ls.stats.LinkFailed.Add(1)
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

// write writes one frame on l's stream, opening it first if needed; on
// failure the stream is reset and dropped. A frame whose write fails on a
// stream opened before goes once more on a new stream: the old one's
// connection may have died unnoticed (a partition killed it, or the peer
// reset it), and the frame written into it was lost although the peer was
// reachable again. After a partition healed, a member's resume lost that
// way left the member held until its hold ran out, while the home numbered
// on (TestScenarios/partition, 75/85 deliveries).
func (ls *links) write(l *link, f outFrame) bool {
	for retried := false; ; retried = true {
		s, fresh, ok := ls.stream(l)
		if !ok {
			return false
		}
		_ = s.SetWriteDeadline(ls.now().Add(10 * time.Second))
		_, err := s.Write(f.b)
		if err == nil {
			return true
		}
		ls.log.Debug("relay write", "peer", l.peer.ShortString(), "err", err, "fresh", fresh)
		s.Reset()
		ls.mu.Lock()
		if l.s == s {
			l.s = nil
		}
		ls.mu.Unlock()
		if fresh || retried {
			return false
		}
		ls.stats.LinkRewritten.Add(1)
	}
}

// stream returns l's stream, opening one when it has none (fresh).
func (ls *links) stream(l *link) (s network.Stream, fresh, ok bool) {
	ls.mu.Lock()
	s = l.s
	ls.mu.Unlock()
	if s != nil {
		return s, false, true
	}
	ctx, cancel := context.WithTimeout(ls.ctx, 5*time.Second)
	s, err := ls.h.NewStream(ctx, l.peer, protocol.RelayID)
	cancel()
	if err != nil {
		ls.log.Debug("relay link", "peer", l.peer.ShortString(), "err", err)
		return nil, false, false
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed {
		s.Reset()
		return nil, false, false
	}
	l.s = s
	return s, true, true
}

// close stops every link and waits for their goroutines. It resets the
// links' streams, so a write blocked on a peer that does not read ends now
// rather than at its deadline (or never, on a transport without one).
func (ls *links) close() {
	ls.mu.Lock()
	if ls.closed {
		ls.mu.Unlock()
		return
	}
	ls.closed = true
	ls.cancel()
	for _, l := range ls.m {
		l.once.Do(func() { close(l.done) })
		if l.s != nil {
			l.s.Reset()
		}
	}
	ls.mu.Unlock()
	ls.wg.Wait()
}

// queued returns the frames and bytes queued on the link to p, and the
// bytes queued on all links.
func (ls *links) queued(p peer.ID) (frames, bytes, total int) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.m[p]; l != nil {
		frames, bytes = l.frames, l.bytes
	}
	return frames, bytes, ls.total
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
