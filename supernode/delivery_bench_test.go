package supernode

import (
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	p2pprotocol "github.com/libp2p/go-libp2p/core/protocol"

	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode/capacity"
)

// BenchmarkMemberDelivery measures what one member delivery costs the
// supernode: one supernode (Router, Admission and fanout engine on a real
// TCP libp2p host, home of the group), members that are real libp2p hosts
// attached over the session protocol and joined with signed group ops, and
// that only read and count frames, and one publisher sending 128-byte
// payloads open loop. Costs are read from a CPU profile over the window, by
// goroutine label: everything the supernode's construction started is
// labelled role=supernode.
//
// Metrics, per delivered message: sn-ns (the supernode's CPU), proc-ns
// (the whole process by rusage: supernode, members, publisher, GC),
// member-ns, sn-allocs (allocations on stacks through the supernode's own
// code: Router, Admission, links, fanout; libp2p's yamux and TLS
// goroutines are not attributed), proc-allocs (the process), and the
// shares of supernode CPU in the Outbox writers (outbox-writer-%: a
// goroutine per member, or the shared pool's goroutines)
// and in the yamux send loops they hand each frame to (yamux-send-%: TLS
// record and write syscall). delivered-% must be 100 at the base
// rate; disorder counts frames out of sequence.
//
//	go test -run '^$' -bench MemberDelivery -benchtime=1x -count=3 ./supernode/
func BenchmarkMemberDelivery(b *testing.B) {
	members, window := 1000, 5*time.Second
	if testing.Short() {
		members, window = 50, time.Second
	}
	sampleAllocs(b)
	// writers=pool is the supernode as shipped (one pool of writer
	// goroutines, queued frames coalesced into one Write); writers=own is
	// the design before it (a writer goroutine per member, one Write per
	// frame), measured in the same run.
	for _, mode := range []string{"pool", "own"} {
		f := newDeliveryFixture(b, members, mode == "own")
		// The high rate runs a shorter window: 200 publishes a second to
		// 1,000 members is more than this code delivers on two cores, and
		// what is queued must drain before the window's profile ends.
		for _, c := range []struct {
			rate   int
			window time.Duration
		}{{20, window}, {200, window / 5}} {
			b.Run(fmt.Sprintf("members=%d/rate=%d/writers=%s", members, c.rate, mode), func(b *testing.B) {
				for range b.N {
					f.window(b, c.rate, c.window)
				}
			})
		}
		// f stays up (idle: keepalives are 10 minutes) until the
		// benchmark's cleanups.
	}
}

// deliveryFixture is the supernode, its members and the publisher.
type deliveryFixture struct {
	sn      host.Host
	r       *Router
	group   string
	members []*deliveryMember
	pub     *deliveryPublisher
	seq     uint64 // publishes numbered so far
}

// deliveryMember is a lightweight client: it attached, joined, and now
// only reads frames and checks their sequence.
type deliveryMember struct {
	h        host.Host
	s        network.Stream
	fr       *protocol.FrameReader
	got      atomic.Uint64 // group messages read
	last     atomic.Uint64 // seq of the last one
	disorder atomic.Uint64 // messages whose seq was not last+1
	gaps     atomic.Uint64 // gap notices
}

func newDeliveryFixture(b *testing.B, members int, perFrame bool) *deliveryFixture {
	b.Helper()
	f := &deliveryFixture{group: "bench-delivery"}
	withRole("supernode", func() {
		f.sn = newTCPHost(b)
		sems, err := capacity.NewSet(capacity.DefaultLimits(members + 16))
		if err != nil {
			b.Fatal(err)
		}
		adm, err := NewAdmission(f.sn, sems.Attached, AdmissionConfig{Writers: newWriters(b), perFrameOutboxes: perFrame, Keepalive: 10 * time.Minute, MaxHandshakes: 256, MaxHandshakesPerPeer: 2})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(adm.Close)
		eng := newEngine(b)
		self := f.sn.ID()
		rg := newRing(b, self)
		f.r, err = NewRouter(f.sn, adm, RouterConfig{Ring: func() *ring.Ring { return rg }, IsSupernode: func(peer.ID) bool { return false },
			Refresh: 10 * time.Minute, Sems: sems, Fanout: eng})
		if err != nil {
			b.Fatal(err)
		}
		f.r.Start()
		b.Cleanup(f.r.Close)
		adm.Start()
	})
	addr := peer.AddrInfo{ID: f.sn.ID(), Addrs: f.sn.Addrs()}

	// Members attach and join in parallel, a few at a time.
	f.members = make([]*deliveryMember, members)
	errs := make(chan error, members)
	var wg sync.WaitGroup
	next := atomic.Int64{}
	withRole("member", func() {
		for range 16 {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= members {
						return
					}
					m, err := joinMember(addr, f.group)
					if err != nil {
						errs <- err
						return
					}
					f.members[i] = m
					go m.read()
				}
			})
		}
		wg.Wait()
	})
	b.Cleanup(func() {
		var cw sync.WaitGroup
		for _, m := range f.members {
			if m != nil {
				cw.Go(func() { _ = m.h.Close() })
			}
		}
		cw.Wait()
	})
	close(errs)
	for err := range errs {
		b.Fatalf("member: %v", err)
	}
	waitFor(b, "every member in the group's local fanout", func() bool {
		f.r.mu.Lock()
		defer f.r.mu.Unlock()
		lg := f.r.local[f.group]
		return lg != nil && lg.Len() == members
	})
	withRole("publisher", func() {
		var err error
		f.pub, err = newDeliveryPublisher(addr)
		if err != nil {
			b.Fatalf("publisher: %v", err)
		}
	})
	b.Cleanup(func() { _ = f.pub.h.Close() })
	return f
}

// sessionAttach connects h to sn and opens an accepted session stream.
func sessionAttach(h host.Host, sn peer.AddrInfo) (network.Stream, *protocol.FrameReader, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := h.Connect(ctx, sn); err != nil {
		return nil, nil, err
	}
	s, err := h.NewStream(ctx, sn.ID, protocol.AttachID)
	if err != nil {
		return nil, nil, err
	}
	claim, err := protocol.SignPresence(h.Peerstore().PrivKey(h.ID()), sn.ID, 1)
	if err != nil {
		return nil, nil, err
	}
	if err := protocol.WriteFrame(s, &pb.AttachRequest{ProtocolVersion: protocol.Version, Reason: pb.AttachRequest_REASON_INITIAL, SessionSeq: 1, Presence: claim}); err != nil {
		return nil, nil, err
	}
	fr := protocol.NewFrameReader(s, protocol.MaxSessionFrame)
	var resp pb.AttachResponse
	_ = s.SetReadDeadline(time.Now().Add(waitTimeout))
	if err := fr.Read(&resp); err != nil {
		return nil, nil, err
	}
	_ = s.SetReadDeadline(time.Time{})
	if resp.GetStatus() != pb.AttachResponse_STATUS_ACCEPT {
		return nil, nil, fmt.Errorf("attach: %v %q", resp.GetStatus(), resp.GetReason())
	}
	return s, fr, nil
}

// joinMember makes a member host, attaches it and joins group with a
// signed claim, as a client does.
func joinMember(sn peer.AddrInfo, group string) (*deliveryMember, error) {
	h, err := tcpHost()
	if err != nil {
		return nil, err
	}
	s, fr, err := sessionAttach(h, sn)
	if err != nil {
		_ = h.Close()
		return nil, err
	}
	claim, err := protocol.SignMembership(h.Peerstore().PrivKey(h.ID()), protocol.Membership{Group: group, Supernode: sn.ID, Join: true, Seq: uint64(time.Now().UnixNano())})
	if err == nil {
		err = protocol.WriteFrame(s, &pb.SessionFrame{Kind: &pb.SessionFrame_GroupOp{GroupOp: &pb.GroupOp{Group: group, Join: true, Claim: claim}}})
	}
	if err != nil {
		_ = h.Close()
		return nil, err
	}
	return &deliveryMember{h: h, s: s, fr: fr}, nil
}

// read counts group messages until the stream ends.
func (m *deliveryMember) read() {
	var f pb.SessionFrame
	for {
		if err := m.fr.Read(&f); err != nil {
			return
		}
		switch k := f.GetKind().(type) {
		case *pb.SessionFrame_GroupMessage:
			seq := k.GroupMessage.GetSeq()
			if last := m.last.Load(); seq != last+1 {
				m.disorder.Add(1)
			}
			m.last.Store(seq)
			m.got.Add(1)
		case *pb.SessionFrame_Gap:
			m.gaps.Add(1)
		}
	}
}

// deliveryPublisher is the client that publishes.
type deliveryPublisher struct {
	h   host.Host
	key crypto.PrivKey
	s   network.Stream
	ok  atomic.Uint64 // OK results
	bad atomic.Uint64 // other results
}

func newDeliveryPublisher(sn peer.AddrInfo) (*deliveryPublisher, error) {
	h, err := tcpHost()
	if err != nil {
		return nil, err
	}
	s, fr, err := sessionAttach(h, sn)
	if err != nil {
		_ = h.Close()
		return nil, err
	}
	p := &deliveryPublisher{h: h, key: h.Peerstore().PrivKey(h.ID()), s: s}
	go func() {
		var f pb.SessionFrame
		for fr.Read(&f) == nil {
			if r := f.GetResult(); r != nil {
				if r.GetStatus() == pb.Result_STATUS_OK {
					p.ok.Add(1)
				} else {
					p.bad.Add(1)
				}
			}
		}
	}()
	return p, nil
}

// publishFrames signs n publishes of 128-byte payloads to group and
// encodes them as session frames, before the window (the publisher's
// signing is not what is measured).
func (p *deliveryPublisher) publishFrames(tb testing.TB, group string, n int) [][]byte {
	tb.Helper()
	out := make([][]byte, n)
	payload := make([]byte, 128)
	for i := range out {
		id := protocol.NewMessageID()
		signed, err := protocol.SignPublish(p.key, group, id, payload)
		if err != nil {
			tb.Fatal(err)
		}
		out[i], err = protocol.AppendFrame(nil, &pb.SessionFrame{Kind: &pb.SessionFrame_Publish{Publish: &pb.GroupPublish{Group: group, Id: id, Signed: signed}}})
		if err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// supernodeCode matches the functions of the supernode's own code, for
// attributing allocations by stack.
func supernodeCode(fn string) bool {
	for _, p := range []string{
		"github.com/overlayd/overlayd/supernode.(*Router)",
		"github.com/overlayd/overlayd/supernode.(*Admission)",
		"github.com/overlayd/overlayd/supernode.(*links)",
		"github.com/overlayd/overlayd/supernode/fanout.",
	} {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

// window publishes rate messages a second for d, open loop, waits until
// every member has read every one (bounded), and reports the costs.
func (f *deliveryFixture) window(b *testing.B, rate int, d time.Duration) {
	n := max(1, int(d.Seconds()*float64(rate)))
	frames := f.pub.publishFrames(b, f.group, n)
	got0 := f.delivered()
	refused0 := f.r.stats.FanoutRefused.Load()
	load := loadAvg()
	var ms0, ms1 runtime.MemStats
	snObj0, _ := heapAllocs(b, supernodeCode)
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	w := startCPU(b)
	start := time.Now()
	interval := time.Second / time.Duration(rate)
	withRole("publisher", func() {
		for i, fr := range frames {
			if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
				time.Sleep(wait) // open loop: the schedule, not the answers, sets the pace
			}
			if _, err := f.pub.s.Write(fr); err != nil {
				b.Fatalf("publish: %v", err)
			}
		}
	})
	want := got0 + uint64(n*len(f.members))
	deadline := time.Now().Add(60 * time.Second)
	for f.delivered() < want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	res := w.stop(b)
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	snObj1, _ := heapAllocs(b, supernodeCode)
	f.seq += uint64(n)
	saveProfile(b, b.Name(), res.raw)

	delivered := f.delivered() - got0
	var disorder, gaps, inOrder uint64
	for _, m := range f.members {
		disorder += m.disorder.Load()
		gaps += m.gaps.Load()
		if m.last.Load() == f.seq {
			inOrder++
		}
	}
	dn := float64(max(delivered, 1))
	sn := res.byRole["supernode"]
	b.ReportMetric(float64(sn.Nanoseconds())/dn, "sn-ns/delivery")
	b.ReportMetric(float64(res.process.Nanoseconds())/dn, "proc-ns/delivery")
	b.ReportMetric(float64(res.byRole["member"].Nanoseconds())/dn, "member-ns/delivery")
	b.ReportMetric(float64(snObj1-snObj0)/dn, "sn-allocs/delivery")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/dn, "proc-allocs/delivery")
	b.ReportMetric(100*float64(delivered)/float64(n*len(f.members)), "delivered-%")
	b.ReportMetric(float64(disorder), "disorder")
	p, err := parseProfile(res.raw)
	if err != nil {
		b.Fatal(err)
	}
	byRoot := cpuByRoot(p, "supernode")
	// The Outbox writers (a goroutine per member, or the shared pool's)
	// and the yamux send loops they hand each frame to (TLS record,
	// syscall).
	writer := byRoot["github.com/overlayd/overlayd/supernode/fanout.(*Outbox).run"] +
		byRoot["github.com/overlayd/overlayd/supernode/fanout.(*Writers).run"]
	yamuxSend := byRoot["github.com/libp2p/go-yamux/v5.(*Session).send"]
	b.ReportMetric(100*float64(writer)/float64(max(sn, 1)), "outbox-writer-%")
	b.ReportMetric(100*float64(yamuxSend)/float64(max(sn, 1)), "yamux-send-%")
	b.Logf("load %s; %d publishes × %d members in %v: delivered %d, gaps %d, disorder %d, members at the last seq %d, fanouts refused %d; publisher results ok %d other %d; supernode CPU %v, process %v (by role: %v)",
		load, n, len(f.members), res.wall.Round(time.Millisecond), delivered, gaps, disorder, inOrder, f.r.stats.FanoutRefused.Load()-refused0, f.pub.ok.Load(), f.pub.bad.Load(), sn, res.process, res.byRole)
	b.Logf("supernode CPU by goroutine: %s", topRoots(byRoot, sn, 8))
	if rate <= 20 && (delivered != uint64(n*len(f.members)) || disorder != 0) {
		b.Errorf("delivered %d of %d, %d out of order: want every message, in order", delivered, n*len(f.members), disorder)
	}
}

func (f *deliveryFixture) delivered() uint64 {
	var n uint64
	for _, m := range f.members {
		n += m.got.Load()
	}
	return n
}

// cpuByRoot sums the CPU of role's samples by the function their
// goroutine started in (the outermost frame below runtime.goexit).
func cpuByRoot(p *profile, role string) map[string]time.Duration {
	vi := p.valueIndex("cpu")
	out := map[string]time.Duration{}
	for _, s := range p.samples {
		if s.labels[roleLabel] != role || len(s.locs) == 0 {
			continue
		}
		root := ""
		for i := len(s.locs) - 1; i >= 0 && (root == "" || root == "runtime.goexit"); i-- {
			fns := p.locFns[s.locs[i]]
			if len(fns) > 0 {
				root = p.fnNames[fns[len(fns)-1]]
			}
		}
		out[root] += time.Duration(s.values[vi])
	}
	return out
}

// topRoots formats the k largest entries of byRoot as shares of total.
func topRoots(byRoot map[string]time.Duration, total time.Duration, k int) string {
	type kv struct {
		k string
		v time.Duration
	}
	var all []kv
	for name, v := range byRoot {
		all = append(all, kv{name, v})
	}
	slices.SortFunc(all, func(a, b kv) int { return int(b.v - a.v) })
	var sb strings.Builder
	for i, e := range all {
		if i == k {
			break
		}
		fmt.Fprintf(&sb, "%s %.1f%%; ", e.k, 100*float64(e.v)/float64(max(total, 1)))
	}
	return sb.String()
}

// deliveryFrameSize is the size of the session frame a member gets for a
// 128-byte publish: the publisher's envelope, the home's stamp and the
// group fields, length prefix included.
func deliveryFrameSize(tb testing.TB) int {
	tb.Helper()
	pubKey, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		tb.Fatal(err)
	}
	homeKey, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		tb.Fatal(err)
	}
	from, _ := peer.IDFromPrivateKey(pubKey)
	id := protocol.NewMessageID()
	signed, err := protocol.SignPublish(pubKey, "bench-delivery", id, make([]byte, 128))
	if err != nil {
		tb.Fatal(err)
	}
	stamp, err := protocol.Stamp(homeKey, "bench-delivery", uint64(time.Now().UnixNano()), 1000, signed)
	if err != nil {
		tb.Fatal(err)
	}
	return len(encodeSession(&pb.SessionFrame{Kind: &pb.SessionFrame_GroupMessage{GroupMessage: &pb.GroupMessage{
		Group: "bench-delivery", Epoch: uint64(time.Now().UnixNano()), Seq: 1000, From: []byte(from), Id: id, Publish: signed, Stamp: stamp}}}))
}

// BenchmarkStreamWriteReference is the floor a member delivery is judged
// against: the writer's CPU per frame of the delivery frame's size,
// written on a bare libp2p stream between two real TCP hosts (TLS, yamux:
// the security and muxer the supernode uses) one Write per frame, the same
// with 8 frames per Write, and on a plain loopback TCP connection (no
// libp2p: the syscall alone). A reader on the other side discards.
//
//	go test -run '^$' -bench StreamWriteReference -count=3 ./supernode/
func BenchmarkStreamWriteReference(b *testing.B) {
	size := deliveryFrameSize(b)
	b.Logf("frame size %d bytes", size)
	for _, per := range []int{1, 8} {
		b.Run(fmt.Sprintf("libp2p/frames-per-write=%d", per), func(b *testing.B) {
			benchStreamWrites(b, size, per, libp2pPipe)
		})
	}
	for _, per := range []int{1, 8} {
		b.Run(fmt.Sprintf("tcp/frames-per-write=%d", per), func(b *testing.B) {
			benchStreamWrites(b, size, per, tcpPipe)
		})
	}
	conns := 1000
	if testing.Short() {
		conns = 50
	}
	b.Run(fmt.Sprintf("tcp-fanout/conns=%d", conns), func(b *testing.B) {
		benchTCPFanout(b, size, conns)
	})
}

// benchTCPFanout is the physical floor of a member delivery as the
// supernode makes it: one frame written to each of conns loopback TCP
// connections in turn (a fanout), whose readers then wait idle for the
// next round, so that every write wakes a reader, as a delivery to an idle
// member does. No libp2p, no TLS: the syscall and the wake-up alone. On
// loopback the writer's syscall also runs the receiving side's TCP input
// and wake-up, which a remote member's host would pay instead.
func benchTCPFanout(b *testing.B, size, conns int) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	var read atomic.Int64
	ws := make([]net.Conn, conns)
	var rwg sync.WaitGroup
	withRole("reader", func() {
		for i := range ws {
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			ws[i] = c
			sc, err := l.Accept()
			if err != nil {
				b.Fatal(err)
			}
			rwg.Go(func() {
				defer sc.Close()
				buf := make([]byte, 4096)
				for {
					n, err := sc.Read(buf)
					read.Add(int64(n))
					if err != nil {
						return
					}
				}
			})
		}
	})
	defer func() {
		for _, c := range ws {
			_ = c.Close()
		}
		rwg.Wait()
	}()
	frame := make([]byte, size)
	rounds := max(1, b.N/conns)
	b.ResetTimer()
	cw := startCPU(b)
	var want int64
	withRole("writer", func() {
		for range rounds {
			for _, c := range ws {
				if _, err := c.Write(frame); err != nil {
					b.Fatal(err)
				}
			}
			want += int64(conns * size)
			// Let every reader drain and park before the next round.
			for read.Load() < want {
				time.Sleep(100 * time.Microsecond)
			}
		}
	})
	res := cw.stop(b)
	b.StopTimer()
	saveProfile(b, b.Name(), res.raw)
	frames := float64(rounds * conns)
	b.ReportMetric(float64(res.byRole["writer"].Nanoseconds())/frames, "writer-ns/frame")
	b.ReportMetric(float64(res.byRole["reader"].Nanoseconds())/frames, "reader-ns/frame")
	b.ReportMetric(float64(res.process.Nanoseconds())/frames, "proc-ns/frame")
}

// pipeFunc opens a writer whose bytes a reader on the other side counts
// (in read). Whatever it creates to write is labelled role=writer; the
// reader role=reader. close ends both.
type pipeFunc func(tb testing.TB, read *atomic.Int64) (w io.Writer, close func())

const referenceProtocol = p2pprotocol.ID("/overlayd-bench/reference/1")

func libp2pPipe(tb testing.TB, read *atomic.Int64) (io.Writer, func()) {
	tb.Helper()
	var rh, wh host.Host
	withRole("reader", func() {
		rh = newTCPHost(tb)
		rh.SetStreamHandler(referenceProtocol, func(s network.Stream) {
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				read.Add(int64(n))
				if err != nil {
					_ = s.Reset()
					return
				}
			}
		})
	})
	var s network.Stream
	withRole("writer", func() {
		wh = newTCPHost(tb)
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := wh.Connect(ctx, peer.AddrInfo{ID: rh.ID(), Addrs: rh.Addrs()}); err != nil {
			tb.Fatal(err)
		}
		var err error
		if s, err = wh.NewStream(ctx, rh.ID(), referenceProtocol); err != nil {
			tb.Fatal(err)
		}
	})
	return s, func() { _ = s.Reset() }
}

func tcpPipe(tb testing.TB, read *atomic.Int64) (io.Writer, func()) {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	withRole("reader", func() {
		go func() {
			defer close(done)
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				read.Add(int64(n))
				if err != nil {
					return
				}
			}
		}()
	})
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	return c, func() { _ = c.Close(); _ = l.Close(); <-done }
}

func benchStreamWrites(b *testing.B, size, per int, open pipeFunc) {
	var read atomic.Int64
	w, closeFn := open(b, &read)
	defer closeFn()
	buf := make([]byte, size*per)
	for i := range buf {
		buf[i] = byte(i)
	}
	writes := max(1, b.N/per)
	b.ResetTimer()
	cw := startCPU(b)
	withRole("writer", func() {
		for range writes {
			if _, err := w.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	want := int64(writes * len(buf))
	deadline := time.Now().Add(waitTimeout)
	for read.Load() < want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	res := cw.stop(b)
	b.StopTimer()
	if read.Load() < want {
		b.Fatalf("reader got %d of %d bytes", read.Load(), want)
	}
	saveProfile(b, b.Name(), res.raw)
	frames := float64(writes * per)
	b.ReportMetric(float64(res.byRole["writer"].Nanoseconds())/frames, "writer-ns/frame")
	b.ReportMetric(float64(res.byRole["reader"].Nanoseconds())/frames, "reader-ns/frame")
	b.ReportMetric(float64(res.process.Nanoseconds())/frames, "proc-ns/frame")
}
