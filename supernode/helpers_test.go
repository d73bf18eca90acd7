package supernode

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	p2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode/capacity"
	"github.com/overlayd/overlayd/supernode/fanout"
)

// waitTimeout bounds every wait of these tests. It is generous so that a
// loaded 2-core machine running -race passes; a healthy run waits
// milliseconds.
const waitTimeout = 10 * time.Second

// waitFor polls cond until it holds, failing the test after waitTimeout.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		}
		<-tick.C
	}
}

// testNet is an in-memory libp2p network (mocknet) whose hosts are all
// linked and connected to each other.
type testNet struct {
	mn    mocknet.Mocknet
	hosts []host.Host

	mu      sync.Mutex
	streams []*deadlineStream
}

func newTestNet(t testing.TB) *testNet {
	t.Helper()
	n := &testNet{mn: mocknet.New()}
	t.Cleanup(func() {
		_ = n.mn.Close()
		// Closing the mocknet resets every stream; closing the pipes too
		// ends a pump blocked on a stream nobody reads any more.
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, d := range n.streams {
			_ = d.pr.Close()
		}
	})
	return n
}

// host adds a host, linked and connected to every host already on the
// network. Its streams honour read deadlines (see deadlineHost).
func (n *testNet) host(t testing.TB) host.Host {
	t.Helper()
	h, err := n.mn.GenPeer()
	if err != nil {
		t.Fatalf("mocknet peer: %v", err)
	}
	for _, o := range n.hosts {
		if _, err := n.mn.LinkPeers(h.ID(), o.ID()); err != nil {
			t.Fatalf("link: %v", err)
		}
		if _, err := n.mn.ConnectPeers(h.ID(), o.ID()); err != nil {
			t.Fatalf("connect: %v", err)
		}
	}
	dh := deadlineHost{Host: h, net: n}
	n.hosts = append(n.hosts, dh)
	return dh
}

// deadlineHost gives a mocknet host's streams working read deadlines.
// mocknet streams ignore SetDeadline ("a noop for mocknet streams since the
// underlying pipe transport does not support deadlines",
// p2p/net/mock/mock_stream.go), while Admission ends silent sessions by a
// read deadline and Router bounds lookups by one, as the real transports
// (yamux, QUIC) enforce them. Without this a silent session would never
// expire, and Admission.Close, which gives a detached client a second to
// close, could wait forever.
type deadlineHost struct {
	host.Host
	net *testNet
}

func (h deadlineHost) SetStreamHandler(pid p2pprotocol.ID, handler network.StreamHandler) {
	h.Host.SetStreamHandler(pid, func(s network.Stream) { handler(h.net.wrap(s)) })
}

func (h deadlineHost) NewStream(ctx context.Context, p peer.ID, pids ...p2pprotocol.ID) (network.Stream, error) {
	s, err := h.Host.NewStream(ctx, p, pids...)
	if err != nil {
		return nil, err
	}
	return h.net.wrap(s), nil
}

// deadlineStream reads its stream through a net.Pipe, which implements
// read deadlines: a pump goroutine copies the stream into the pipe.
type deadlineStream struct {
	network.Stream
	pr, pw net.Conn

	mu  sync.Mutex
	err error // the stream's read error, set before pw is closed
}

func (n *testNet) wrap(s network.Stream) network.Stream {
	pr, pw := net.Pipe()
	d := &deadlineStream{Stream: s, pr: pr, pw: pw}
	n.mu.Lock()
	n.streams = append(n.streams, d)
	n.mu.Unlock()
	go d.pump()
	return d
}

// pump copies the stream into the pipe. It ends when the stream fails or
// ends (a local Close or Reset, the remote's, or mocknet closing the
// connection) or when the pipe's reading end is closed.
func (d *deadlineStream) pump() {
	buf := make([]byte, 4096)
	for {
		n, err := d.Stream.Read(buf)
		if n > 0 {
			if _, werr := d.pw.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			d.mu.Lock()
			d.err = err
			d.mu.Unlock()
			_ = d.pw.Close()
			return
		}
	}
}

// Read returns the stream's own error (io.EOF, network.ErrReset) once the
// data before it is read, and os.ErrDeadlineExceeded (a Timeout() error)
// past the read deadline.
func (d *deadlineStream) Read(b []byte) (int, error) {
	n, err := d.pr.Read(b)
	if err == io.EOF {
		d.mu.Lock()
		if d.err != nil {
			err = d.err
		}
		d.mu.Unlock()
	}
	return n, err
}

func (d *deadlineStream) SetDeadline(t time.Time) error {
	_ = d.pr.SetReadDeadline(t)
	return d.Stream.SetDeadline(t)
}

func (d *deadlineStream) SetReadDeadline(t time.Time) error {
	_ = d.pr.SetReadDeadline(t)
	return d.Stream.SetReadDeadline(t)
}

func (d *deadlineStream) Close() error {
	err := d.Stream.Close()
	_ = d.pr.Close()
	return err
}

func (d *deadlineStream) CloseRead() error {
	err := d.Stream.CloseRead()
	_ = d.pr.Close()
	return err
}

func (d *deadlineStream) Reset() error {
	err := d.Stream.Reset()
	_ = d.pr.Close()
	return err
}

func (d *deadlineStream) ResetWithError(code network.StreamErrorCode) error {
	err := d.Stream.ResetWithError(code)
	_ = d.pr.Close()
	return err
}

// testSupernode is an Admission, and optionally a Router, on a mocknet host.
type testSupernode struct {
	h    host.Host
	adm  *Admission
	sems *capacity.Set
	r    *Router // nil unless a RouterConfig was given
}

// supernodeConfig configures newSupernode.
type supernodeConfig struct {
	capacity int             // attached-peers limit (DefaultLimits)
	adm      AdmissionConfig // Keepalive etc.; zero fields take the defaults
	handler  SessionHandler  // set on the Admission when there is no router
	router   *RouterConfig   // Ring and IsSupernode; Sems and Fanout are filled in
}

// newSupernode builds and starts a supernode on a new host of n, wired as
// node wires it: router started before admission. Cleanups close the
// router, the fanout engine and the admission.
func newSupernode(t testing.TB, n *testNet, cfg supernodeConfig) *testSupernode {
	t.Helper()
	h := n.host(t)
	sems, err := capacity.NewSet(capacity.DefaultLimits(max(cfg.capacity, 1)))
	if err != nil {
		t.Fatalf("semaphores: %v", err)
	}
	ac := cfg.adm
	if ac.Writers == nil {
		// As node wires it: one pool of writer goroutines for every
		// session's outbox, closed after the admission (cleanups run
		// last-in first-out).
		ac.Writers = newWriters(t)
	}
	adm, err := NewAdmission(h, sems.Attached, ac)
	if err != nil {
		t.Fatalf("NewAdmission: %v", err)
	}
	t.Cleanup(adm.Close)
	sn := &testSupernode{h: h, adm: adm, sems: sems}
	if cfg.router != nil {
		eng := newEngine(t)
		rc := *cfg.router
		rc.Sems, rc.Fanout = sems, eng
		if rc.Ring == nil {
			rc.Ring = func() *ring.Ring { return nil }
		}
		if rc.IsSupernode == nil {
			rc.IsSupernode = func(peer.ID) bool { return false }
		}
		sn.r, err = NewRouter(h, adm, rc)
		if err != nil {
			t.Fatalf("NewRouter: %v", err)
		}
		sn.r.Start()
		t.Cleanup(sn.r.Close)
	} else if cfg.handler != nil {
		adm.SetHandler(cfg.handler)
	}
	adm.Start()
	return sn
}

// newEngine starts a fanout engine that the test's cleanup closes.
func newEngine(t testing.TB) *fanout.Engine {
	t.Helper()
	eng, err := fanout.New(0)
	if err != nil {
		t.Fatalf("fanout engine: %v", err)
	}
	eng.Start()
	t.Cleanup(eng.Close)
	return eng
}

// newWriters starts a pool of outbox writers that the test's cleanup
// closes.
func newWriters(t testing.TB) *fanout.Writers {
	t.Helper()
	w, err := fanout.NewWriters(0)
	if err != nil {
		t.Fatalf("fanout.NewWriters: %v", err)
	}
	w.Start()
	t.Cleanup(w.Close)
	return w
}

// newRing returns a ring of the given peers, weight 1 each.
func newRing(t testing.TB, ids ...peer.ID) *ring.Ring {
	t.Helper()
	ms := make([]ring.Member, 0, len(ids))
	for _, id := range ids {
		ms = append(ms, ring.Member{ID: id.String(), Weight: 1})
	}
	r, err := ring.New(ms)
	if err != nil {
		t.Fatalf("ring: %v", err)
	}
	return r
}

// attachClient is the client side of one attach stream, written from the
// protocol: AttachRequest, AttachResponse, then SessionFrames.
type attachClient struct {
	t  testing.TB
	s  network.Stream
	fr *protocol.FrameReader
}

// dialAttach opens an attach stream from h to sn and sends the
// AttachRequest; read the answer with response. The stream is reset at
// cleanup (before the supernode closes: cleanups run last-in first-out).
func dialAttach(t testing.TB, h host.Host, sn peer.ID, seq uint64) *attachClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	s, err := h.NewStream(ctx, sn, protocol.AttachID)
	if err != nil {
		t.Fatalf("open attach stream: %v", err)
	}
	t.Cleanup(func() { _ = s.Reset() })
	claim, err := protocol.SignPresence(h.Peerstore().PrivKey(h.ID()), sn, seq)
	if err != nil {
		t.Fatal(err)
	}
	req := &pb.AttachRequest{ProtocolVersion: protocol.Version, Reason: pb.AttachRequest_REASON_INITIAL, SessionSeq: seq, Presence: claim}
	if err := protocol.WriteFrame(s, req); err != nil {
		t.Fatalf("write attach request: %v", err)
	}
	return &attachClient{t: t, s: s, fr: protocol.NewFrameReader(s, protocol.MaxSessionFrame)}
}

// attach dials and returns the supernode's answer.
func attach(t testing.TB, h host.Host, sn peer.ID, seq uint64) (*attachClient, *pb.AttachResponse) {
	t.Helper()
	c := dialAttach(t, h, sn, seq)
	return c, c.response()
}

// mustAccept attaches and fails unless the answer is ACCEPT.
func mustAccept(t testing.TB, h host.Host, sn peer.ID, seq uint64) *attachClient {
	t.Helper()
	c, resp := attach(t, h, sn, seq)
	if resp.GetStatus() != pb.AttachResponse_STATUS_ACCEPT {
		t.Fatalf("attach of %s: %v (%q), want ACCEPT", h.ID().ShortString(), resp.GetStatus(), resp.GetReason())
	}
	return c
}

func (c *attachClient) response() *pb.AttachResponse {
	c.t.Helper()
	var resp pb.AttachResponse
	if err := c.read(&resp); err != nil {
		c.t.Fatalf("read attach response: %v", err)
	}
	return &resp
}

// read reads one frame, waiting at most waitTimeout.
func (c *attachClient) read(m proto.Message) error {
	_ = c.s.SetReadDeadline(time.Now().Add(waitTimeout))
	return c.fr.Read(m)
}

func (c *attachClient) send(f *pb.SessionFrame) {
	c.t.Helper()
	if err := protocol.WriteFrame(c.s, f); err != nil {
		c.t.Fatalf("write session frame: %v", err)
	}
}

// ping sends a Ping and returns the first session frame that answers.
func (c *attachClient) ping(seq uint64) *pb.SessionFrame {
	c.t.Helper()
	c.send(&pb.SessionFrame{Kind: &pb.SessionFrame_Ping{Ping: &pb.Ping{Seq: seq}}})
	var f pb.SessionFrame
	if err := c.read(&f); err != nil {
		c.t.Fatalf("read after ping %d: %v", seq, err)
	}
	return &f
}

// detach ends the session the orderly way.
func (c *attachClient) detach() {
	c.t.Helper()
	c.send(&pb.SessionFrame{Kind: &pb.SessionFrame_Detach{Detach: &pb.Detach{Reason: "leaving"}}})
}

// end reads until the stream ends and returns the error that ended it
// (io.EOF for a close, network.ErrReset for a reset). A frame before the end
// fails the test.
func (c *attachClient) end() error {
	c.t.Helper()
	var f pb.SessionFrame
	err := c.read(&f)
	if err == nil {
		c.t.Fatalf("got %v, want the stream to end", &f)
	}
	var te interface{ Timeout() bool }
	if errors.As(err, &te) && te.Timeout() {
		c.t.Fatalf("stream still open after %v", waitTimeout)
	}
	return err
}

// sessionEvent is one call of a SessionHandler.
type sessionEvent struct {
	attached bool
	client   peer.ID
	seq      uint64
}

// recorder is a SessionHandler that records Attached and Detached.
type recorder struct {
	mu     sync.Mutex
	events []sessionEvent
}

var _ SessionHandler = (*recorder)(nil)

func (r *recorder) Attached(client peer.ID, seq uint64, _ []byte) {
	r.mu.Lock()
	r.events = append(r.events, sessionEvent{attached: true, client: client, seq: seq})
	r.mu.Unlock()
}

func (r *recorder) Detached(client peer.ID, seq uint64) {
	r.mu.Lock()
	r.events = append(r.events, sessionEvent{attached: false, client: client, seq: seq})
	r.mu.Unlock()
}

func (r *recorder) Frame(peer.ID, *pb.SessionFrame) {}

// has reports whether ev was recorded.
func (r *recorder) has(ev sessionEvent) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.events, ev)
}

// of returns the events about client.
func (r *recorder) of(client peer.ID) []sessionEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sessionEvent
	for _, e := range r.events {
		if e.client == client {
			out = append(out, e)
		}
	}
	return out
}

// waitEvent waits until ev is recorded.
func (r *recorder) waitEvent(t testing.TB, ev sessionEvent) {
	t.Helper()
	kind := "Detached"
	if ev.attached {
		kind = "Attached"
	}
	waitFor(t, kind+"("+ev.client.ShortString()+")", func() bool { return r.has(ev) })
}

// clockCaller returns the function that read a test clock: the first
// caller outside the clock itself (whose frames, method-value wrappers
// included, have clock in their names).
func clockCaller(clock string) string {
	pcs := make([]uintptr, 8)
	n := runtime.Callers(2, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if !strings.Contains(f.Function, clock) || !more {
			return f.Function
		}
	}
}

// waitClosed waits until ch is closed.
func waitClosed(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitTimeout):
		t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
	}
}

// peerSet is a concurrency-safe set of peers, for IsSupernode.
type peerSet struct {
	mu sync.Mutex
	m  map[peer.ID]bool
}

func (s *peerSet) add(ps ...peer.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[peer.ID]bool{}
	}
	for _, p := range ps {
		s.m[p] = true
	}
}

func (s *peerSet) has(p peer.ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[p]
}

// readFrame reads one frame of at most limit bytes from s, waiting at
// most waitTimeout.
func readFrame(s network.Stream, limit int, m proto.Message) error {
	_ = s.SetReadDeadline(time.Now().Add(waitTimeout))
	return protocol.NewFrameReader(s, limit).Read(m)
}

// sessionOf returns client's session at a, or nil.
func sessionOf(a *Admission, client peer.ID) *session {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sessions[client]
}

// presenceOf returns r's presence record of client.
func presenceOf(r *Router, client peer.ID) (presenceRecord, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.presence[client]
	return p, ok
}

// presenceBatch is one presence record as a batch.
// An attachment carries the client's signed claim for location when the
// client is one of newPeerID's (whose keys the tests hold).
func presenceBatch(client, location peer.ID, seq uint64, attached bool) *pb.PresenceBatch {
	rec := &pb.PresenceRecord{Client: []byte(client), Location: []byte(location), SessionSeq: seq, Attached: attached}
	if k, ok := testKeys.Load(client); ok && attached {
		rec.Claim, _ = protocol.SignPresence(k.(crypto.PrivKey), location, seq)
	}
	return &pb.PresenceBatch{Records: []*pb.PresenceRecord{rec}}
}

// groupOpFrame is h's GroupOp for group at supernode sn, with the member's
// signed claim, as a client sends it.
func groupOpFrame(t testing.TB, h host.Host, sn peer.ID, group string, join bool) *pb.SessionFrame {
	t.Helper()
	claim, err := protocol.SignMembership(h.Peerstore().PrivKey(h.ID()), protocol.Membership{Group: group, Supernode: sn, Join: join, Seq: uint64(time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	return &pb.SessionFrame{Kind: &pb.SessionFrame_GroupOp{GroupOp: &pb.GroupOp{Group: group, Join: join, Claim: claim}}}
}
