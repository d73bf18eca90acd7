package testnet

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pspb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/test"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/node"
	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// The cost benchmarks measure the CPU that one control-plane operation of
// the real code costs, for the simulator's model (testnet/sim Params:
// AttemptCPU, AcceptCPU, KeepaliveCPU, VerifyCPU). Each runs in this
// process on loopback: the supernode is a real node.Node (testnet.Start,
// one supernode), and the other side is a bare libp2p host that speaks the
// attach protocol as node/client does (client.ask: open a stream, send an
// AttachRequest with a signed presence claim, read the AttachResponse),
// with GossipSub on the directory topic as every node runs it, so that a
// fresh connection costs the supernode what a real client's does.
//
// CPU is measured two ways over the timed loop: the process's CPU time
// (getrusage, user + system; both ends of every connection are in this
// process) per operation, "cpu-µs/op"; and, from a CPU profile of the same
// window, the part under the supernode's pprof label (testnet.Config
// ProfileLabels: everything its Start launched, its connections' goroutines
// included), "sn-cpu-µs/op", and under the client hosts' label,
// "client-cpu-µs/op". Runtime work that carries no label (GC, timers'
// callbacks, the netpoller) is in neither; "unlabelled-cpu-µs/op" says how
// much, and "sn-est-cpu-µs/op" is the supernode's label plus a share of it
// in proportion to the labelled CPU. The profile samples at 100 Hz: with
// -benchtime 3s the per-label figures rest on 100-300 samples each (too
// few for the keepalive's). The simulator's defaults come from
// BenchmarkCostDaemon (cost_overload_test.go), which runs the real binary
// as the supernode and reads its CPU alone; these in-process figures are
// the one-process testnet's (both halves of every operation).
//
//	go test -run '^$' -bench 'BenchmarkCost' -benchtime 3s -count 3 ./testnet
//
// Under -short or -benchtime=1x (CI) each takes about a second.

const (
	// costCapacity is the supernode's capacity: the BUSY benchmarks fill
	// it with sessions held by other clients.
	costCapacity = 16
	// costWorkers is how many attempts are in flight at once.
	costWorkers = 2
	// costClientRole is the client hosts' pprof label value.
	costClientRole = "costclient"
)

// costNet is one running supernode and its dial address.
type costNet struct {
	net *Network
	sn  *node.Node
	ai  peer.AddrInfo
}

// costStart starts one supernode (a real node.Node under the supernode
// label) of capacity costCapacity and keepalive ka. tb's cleanup closes it.
func costStart(ctx context.Context, tb testing.TB, ka time.Duration) *costNet {
	tb.Helper()
	net, err := Start(ctx, Config{
		Supernodes: 1, Capacity: costCapacity,
		AnnounceInterval: 10 * time.Second, Keepalive: ka, ReturnInterval: time.Hour,
		Seed: 17, SingleBootstrap: true, NoGroup: true, ProfileLabels: true,
	})
	if err != nil {
		tb.Fatalf("start supernode: %v", err)
	}
	tb.Cleanup(func() { net.Close() })
	sn := net.Supernodes()[0]
	return &costNet{net: net, sn: sn, ai: peer.AddrInfo{ID: sn.ID(), Addrs: sn.Host().Addrs()}}
}

// costClient is a bare libp2p host (TCP, the default security and muxer,
// identify) with GossipSub on the directory topic, that attaches as
// node/client does.
type costClient struct {
	h    host.Host
	key  crypto.PrivKey
	seq  atomic.Uint64
	stop context.CancelFunc
	done chan struct{}
}

// newCostClient starts a client host under the client label; gossip adds
// GossipSub. tb's cleanup closes it.
func newCostClient(ctx context.Context, tb testing.TB, gossip bool) *costClient {
	tb.Helper()
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	c := &costClient{key: key, done: make(chan struct{})}
	c.seq.Store(uint64(time.Now().UnixNano()))
	var cctx context.Context
	cctx, c.stop = context.WithCancel(ctx)
	msgWithRole(cctx, costClientRole, func(cctx context.Context) {
		c.h, err = libp2p.New(libp2p.Identity(key), libp2p.NoListenAddrs, libp2p.NoTransports,
			libp2p.Transport(tcp.NewTCPTransport), libp2p.DisableMetrics(),
			libp2p.ResourceManager(&network.NullResourceManager{}))
		if err != nil {
			return
		}
		if !gossip {
			close(c.done)
			return
		}
		var sub *pubsub.Subscription
		ps, perr := pubsub.NewGossipSub(cctx, c.h)
		if perr == nil {
			var t *pubsub.Topic
			if t, perr = ps.Join(protocol.DirectoryTopic); perr == nil {
				sub, perr = t.Subscribe()
			}
		}
		if perr != nil {
			err = perr
			close(c.done)
			return
		}
		go func() {
			defer close(c.done)
			for {
				if _, err := sub.Next(cctx); err != nil {
					return
				}
			}
		}()
	})
	if err != nil {
		c.stop()
		if c.h != nil {
			c.h.Close()
		}
		tb.Fatalf("client host: %v", err)
	}
	tb.Cleanup(c.close)
	return c
}

func (c *costClient) close() {
	c.stop()
	<-c.done
	c.h.Close()
}

// costSession is an accepted attach stream.
type costSession struct {
	s   network.Stream
	fr  *protocol.FrameReader
	seq uint64
}

// attach runs the attach handshake with ai, as node/client's ask does. It
// returns the answer's status, and the session on ACCEPT.
func (c *costClient) attach(ctx context.Context, ai peer.AddrInfo) (pb.AttachResponse_Status, *costSession, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c.h.Peerstore().AddAddrs(ai.ID, ai.Addrs, time.Hour)
	s, err := c.h.NewStream(ctx, ai.ID, protocol.AttachID)
	if err != nil {
		return 0, nil, fmt.Errorf("open stream: %w", err)
	}
	deadline, _ := ctx.Deadline()
	_ = s.SetDeadline(deadline)
	seq := c.seq.Add(1)
	claim, err := protocol.SignPresence(c.key, ai.ID, seq)
	if err != nil {
		s.Reset()
		return 0, nil, err
	}
	if err := protocol.WriteFrame(s, &pb.AttachRequest{ProtocolVersion: protocol.Version, Reason: pb.AttachRequest_REASON_INITIAL, SessionSeq: seq, Presence: claim}); err != nil {
		s.Reset()
		return 0, nil, fmt.Errorf("write request: %w", err)
	}
	fr := protocol.NewFrameReader(s, protocol.MaxSessionFrame)
	var resp pb.AttachResponse
	if err := fr.Read(&resp); err != nil {
		s.Reset()
		return 0, nil, fmt.Errorf("read answer: %w", err)
	}
	if resp.GetStatus() != pb.AttachResponse_STATUS_ACCEPT {
		s.Close()
		return resp.GetStatus(), nil, nil
	}
	_ = s.SetDeadline(time.Time{})
	return resp.GetStatus(), &costSession{s: s, fr: fr}, nil
}

// ping sends one keepalive ping and reads its pong.
func (s *costSession) ping(timeout time.Duration) error {
	s.seq++
	_ = s.s.SetDeadline(time.Now().Add(timeout))
	if err := protocol.WriteFrame(s.s, &pb.SessionFrame{Kind: &pb.SessionFrame_Ping{Ping: &pb.Ping{Seq: s.seq}}}); err != nil {
		return err
	}
	for {
		var f pb.SessionFrame
		if err := s.fr.Read(&f); err != nil {
			return err
		}
		if p, ok := f.GetKind().(*pb.SessionFrame_Pong); ok && p.Pong.GetSeq() == s.seq {
			return nil
		}
	}
}

// detach ends the session as node/client's sendDetach does, then waits
// for the supernode to close its side (it does on reading the Detach), so
// that the session has ended there before the client's next attempt (the
// supernode admits 4 attach streams per peer at a time).
func (s *costSession) detach() {
	_ = s.s.SetDeadline(time.Now().Add(5 * time.Second))
	if err := protocol.WriteFrame(s.s, &pb.SessionFrame{Kind: &pb.SessionFrame_Detach{Detach: &pb.Detach{Reason: "done"}}}); err != nil {
		s.s.Reset()
		return
	}
	_ = s.s.CloseWrite()
	for {
		var f pb.SessionFrame
		if err := s.fr.Read(&f); err != nil {
			break
		}
	}
	_ = s.s.Close()
}

// costMeasure runs op b.N times over costWorkers goroutines, and reports
// the CPU per operation (costRun; insn: a supernode runs in this process). op gets the worker's index and returns
// an error to count.
func costMeasure(ctx context.Context, b *testing.B, insn bool, op func(w int) error) {
	b.Helper()
	var next atomic.Int64
	var errs atomic.Int64
	var first atomic.Value
	costRun(ctx, b, insn, func() {
		var wg sync.WaitGroup
		for w := range costWorkers {
			wg.Go(func() {
				for next.Add(1) <= int64(b.N) {
					if err := op(w); err != nil {
						errs.Add(1)
						first.CompareAndSwap(nil, err)
					}
				}
			})
		}
		wg.Wait()
	})
	if n := errs.Load(); n > 0 {
		b.Errorf("%d of %d operations failed; first: %v", n, b.N, first.Load())
	}
}

// costRun runs the timed loop (b.N operations) under the client label,
// inside one CPU window, and reports the CPU per operation.
func costRun(ctx context.Context, b *testing.B, insn bool, loop func()) {
	b.Helper()
	b.ResetTimer()
	win := msgStartCPU()
	msgWithRole(ctx, costClientRole, func(context.Context) { loop() })
	u, err := win.stop("")
	b.StopTimer()
	if err != nil {
		b.Logf("profile: %v", err)
	}
	costReport(b, u, float64(b.N), insn)
}

// costPing pings every session every `every` until b.N pongs came back.
func costPing(b *testing.B, sess []*costSession, every time.Duration) {
	b.Helper()
	var left atomic.Int64
	left.Store(int64(b.N))
	var failed atomic.Value
	var wg sync.WaitGroup
	for _, s := range sess {
		wg.Go(func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for left.Add(-1) >= 0 {
				<-t.C
				if err := s.ping(5 * time.Second); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Errorf("ping: %v", err)
	}
}

// costReport reports the window's CPU per operation. insn says whether a
// supernode runs in this process (its label's figures are reported).
func costReport(b *testing.B, u msgCPUUse, ops float64, insn bool) {
	b.Helper()
	perOp := func(s float64) float64 { return s * 1e6 / ops }
	b.ReportMetric(perOp(u.ProcessS), "cpu-µs/op")
	if u.ByRoleS != nil {
		sn, cl, un := u.ByRoleS[msgRoleSupernode], u.ByRoleS[costClientRole], u.ByRoleS["unlabelled"]
		b.ReportMetric(perOp(cl), "client-cpu-µs/op")
		b.ReportMetric(perOp(un), "unlabelled-cpu-µs/op")
		if insn {
			b.ReportMetric(perOp(sn), "sn-cpu-µs/op")
			// The supernode's estimate: its label, plus the unlabelled
			// runtime work shared in proportion to the labelled CPU.
			if sn+cl > 0 {
				b.ReportMetric(perOp(sn+un*sn/(sn+cl)), "sn-est-cpu-µs/op")
			}
		}
	}
	b.ReportMetric(u.LoadAvg1, "loadavg")
}

// BenchmarkCostAttach is one attach attempt, answered ACCEPT or BUSY, on a
// fresh connection (the client's connection to the supernode is closed
// before each attempt, so the attempt pays TCP, the security handshake, the
// muxer, identify and GossipSub's hello on both sides, then the attach
// protocol, then the connection's teardown) or on an existing one (a new
// stream only). An accepted session is detached at once, so accept
// includes the session's setup and teardown. busy runs with the
// supernode's costCapacity slots held by other clients' sessions. Also:
// dead-dial, one attempt to a supernode that crashed (its host closed: the
// kernel refuses the connection), whose cost is all the client's (the dial
// backoff is cleared before each, as for a first dial). conn=fresh-nogossip
// is a BUSY on a fresh connection from a client host without GossipSub:
// the difference is GossipSub's share of a connection.
func BenchmarkCostAttach(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cn := costStart(ctx, b, 5*time.Second)
	clients := make([]*costClient, costWorkers)
	bare := make([]*costClient, costWorkers) // without GossipSub
	for i := range clients {
		clients[i] = newCostClient(ctx, b, true)
		bare[i] = newCostClient(ctx, b, false)
	}
	// The supernode admits once its node has started; wait for one ACCEPT.
	if err := waitFor(ctx, 10*time.Second, 20*time.Millisecond, func() bool {
		st, s, err := clients[0].attach(ctx, cn.ai)
		if s != nil {
			s.detach()
		}
		return err == nil && st == pb.AttachResponse_STATUS_ACCEPT
	}); err != nil {
		b.Fatalf("supernode never accepted: %v", err)
	}
	attempt := func(want pb.AttachResponse_Status, fresh bool, cs []*costClient) func(w int) error {
		return costAttempt(ctx, cs, cn.ai, want, fresh)
	}
	for _, fresh := range []bool{true, false} {
		conn := "existing"
		if fresh {
			conn = "fresh"
		}
		b.Run("answer=accept/conn="+conn, func(b *testing.B) {
			costMeasure(ctx, b, true, attempt(pb.AttachResponse_STATUS_ACCEPT, fresh, clients))
		})
	}
	// Fill the supernode: costCapacity sessions, kept alive.
	_, hold := costHoldAI(ctx, b, cn.ai, costCapacity, time.Second)
	for _, fresh := range []bool{true, false} {
		conn := "existing"
		if fresh {
			conn = "fresh"
		}
		b.Run("answer=busy/conn="+conn, func(b *testing.B) {
			costMeasure(ctx, b, true, attempt(pb.AttachResponse_STATUS_BUSY, fresh, clients))
		})
	}
	b.Run("answer=busy/conn=fresh-nogossip", func(b *testing.B) {
		costMeasure(ctx, b, true, attempt(pb.AttachResponse_STATUS_BUSY, true, bare))
	})
	hold()
	b.Run("answer=dead-dial", func(b *testing.B) {
		dead := costDeadAddr(b)
		costMeasure(ctx, b, false, func(w int) error {
			c := clients[w]
			id, err := test.RandPeerID()
			if err != nil {
				return err
			}
			if sw, ok := c.h.Network().(*swarm.Swarm); ok {
				sw.Backoff().Clear(id)
			}
			_, _, err = c.attach(ctx, peer.AddrInfo{ID: id, Addrs: []ma.Multiaddr{dead}})
			if err == nil {
				return errors.New("a dial to a closed port succeeded")
			}
			c.h.Peerstore().RemovePeer(id)
			c.h.Peerstore().ClearAddrs(id)
			return nil
		})
	})
}

// costDeadAddr is the address of a supernode host that crashed: a real
// supernode's listener, closed abruptly (the kernel then refuses
// connections to its port, as after a process crash).
func costDeadAddr(b *testing.B) ma.Multiaddr {
	b.Helper()
	ctx := context.Background()
	net, err := Start(ctx, Config{Supernodes: 1, Capacity: 1, AnnounceInterval: 10 * time.Second, Seed: 18, NoGroup: true})
	if err != nil {
		b.Fatal(err)
	}
	defer net.Close()
	sn := net.Supernodes()[0]
	addr := sn.Host().Addrs()[0]
	if err := net.Crash(sn); err != nil {
		b.Fatal(err)
	}
	return addr
}

// BenchmarkCostKeepalive is one keepalive ping and its pong on an attached
// session: costCapacity sessions, each pinging every 10 ms (as
// node/client does every keepalive, only faster), until b.N pongs came
// back. The supernode's side is reading the ping, building the pong and
// writing it through the session's outbox.
func BenchmarkCostKeepalive(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cn := costStart(ctx, b, 5*time.Second)
	sess := make([]*costSession, costCapacity)
	if err := waitFor(ctx, 10*time.Second, 20*time.Millisecond, func() bool {
		c := newCostClient(ctx, b, false)
		st, s, err := c.attach(ctx, cn.ai)
		if err == nil && st == pb.AttachResponse_STATUS_ACCEPT {
			sess[0] = s
			return true
		}
		return false
	}); err != nil {
		b.Fatalf("supernode never accepted: %v", err)
	}
	for i := 1; i < len(sess); i++ {
		c := newCostClient(ctx, b, false)
		st, s, err := c.attach(ctx, cn.ai)
		if err != nil || st != pb.AttachResponse_STATUS_ACCEPT {
			b.Fatalf("session %d: answered %v: %v", i, st, err)
		}
		sess[i] = s
	}
	defer func() {
		for _, s := range sess {
			s.detach()
		}
	}()
	// costCapacity sessions: 1,600 pings/s. Faster, the pings batch (at
	// 2 ms, 8,000/s, they cost half as much each), and a real session
	// pings every 5 s.
	const every = 10 * time.Millisecond
	b.Run("sessions=16", func(b *testing.B) {
		costRun(ctx, b, true, func() { costPing(b, sess, every) })
	})
}

// BenchmarkCostVerify is one directory announcement's check on receipt,
// as a node runs it for every GossipSub message on the directory topic:
// GossipSub's signature check of the message (go-libp2p-pubsub's
// verifyMessageSignature, unexported: the message without its signature
// marshalled, prefixed pubsub.SignPrefix, checked against the key inlined in
// the signer's peer ID — done here the same way), then the node's
// validator: directory.Admit (the rate limits) and directory.Receive
// (decode, then Apply with the node's MegaVerifier). mode=open is an open
// network's supernode announcement; mode=certified a certified network's
// (its supernode certificate is checked, protocol.VerifySupernodeCert);
// mode=mega a mega-supernode's (protocol.VerifyMegaCert). 256 supernodes
// announce, one round per announce interval of a virtual clock; the
// messages are built and signed before the timed loop.
func BenchmarkCostVerify(b *testing.B) {
	for _, mode := range []string{"open", "certified", "mega"} {
		b.Run("mode="+mode, func(b *testing.B) { costVerify(b, mode) })
	}
}

func costVerify(b *testing.B, mode string) {
	const signers = 256
	const iv = 10 * time.Second
	op, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	trusted := []crypto.PubKey{op.GetPublic()}
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	type signer struct {
		key  crypto.PrivKey
		id   peer.ID
		cert []byte
	}
	ss := make([]signer, signers)
	addr := ma.StringCast("/ip4/203.0.113.7/tcp/4001")
	for i := range ss {
		k, id, err := msgKey()
		if err != nil {
			b.Fatal(err)
		}
		ss[i] = signer{key: k, id: id}
		c := protocol.Cert{Subject: id, Capacity: 1000, NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(1000 * time.Hour), Serial: uint64(i + 1)}
		switch mode {
		case "certified":
			ss[i].cert, err = protocol.SealSupernodeCert(c, op)
		case "mega":
			ss[i].cert, err = protocol.SealMegaCert(c, op)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	verify := func(a protocol.Announcement, now time.Time) (protocol.MegaCert, error) {
		noRevocation := func(uint64) bool { return false }
		switch {
		case a.Role == protocol.RoleMega:
			return protocol.VerifyMegaCert(a.MegaCert, trusted, a.ID, now, noRevocation)
		case mode == "open":
			return protocol.Cert{}, nil
		default:
			return protocol.VerifySupernodeCert(a.MegaCert, trusted, a.ID, now, noRevocation)
		}
	}
	dir := directory.New(directory.WithMegaVerifier(verify))
	dir.SetLimits(directory.DefaultLimits(iv))
	// Each message arrives from one of the node's GossipSub mesh peers.
	var from [8]peer.ID
	for i := range from {
		if from[i], err = test.RandPeerID(); err != nil {
			b.Fatal(err)
		}
	}
	// The messages, as they arrive: GossipSub RPC bytes.
	msgs := make([][]byte, b.N)
	for i := range msgs {
		s := ss[i%signers]
		round := i / signers
		now := t0.Add(time.Duration(round) * iv)
		a := protocol.Announcement{ID: s.id, Addrs: []ma.Multiaddr{addr}, Role: protocol.RoleSupernode, Capacity: 1000, Load: 10,
			Version: protocol.Version, Seq: uint64(round + 1), Interval: iv, Issued: now, MegaCert: s.cert}
		if mode == "mega" {
			a.Role = protocol.RoleMega
		}
		data, err := a.Marshal()
		if err != nil {
			b.Fatal(err)
		}
		m := &pspb.Message{From: []byte(s.id), Data: data, Seqno: fmt.Appendf(nil, "%08d", i), Topic: proto.String(protocol.DirectoryTopic)}
		unsigned, err := proto.Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		if m.Signature, err = s.key.Sign(append([]byte(pubsub.SignPrefix), unsigned...)); err != nil {
			b.Fatal(err)
		}
		if msgs[i], err = proto.Marshal(&pspb.RPC{Publish: []*pspb.Message{m}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	c0 := processCPU()
	for i, raw := range msgs {
		now := t0.Add(time.Duration(i/signers)*iv + time.Millisecond)
		var rpc pspb.RPC
		if err := proto.Unmarshal(raw, &rpc); err != nil {
			b.Fatal(err)
		}
		m := rpc.Publish[0]
		if err := costCheckSignature(m); err != nil {
			b.Fatal(err)
		}
		signer := peer.ID(m.From)
		if err := dir.Admit(from[i%len(from)], signer, now); err != nil {
			b.Fatalf("admit %d: %v", i, err)
		}
		if _, err := dir.Receive(signer, m.Data, nil, now); err != nil {
			b.Fatalf("receive %d: %v", i, err)
		}
	}
	cpu := processCPU() - c0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
}

// costCheckSignature is GossipSub's check of a message's signature
// (go-libp2p-pubsub sign.go, verifyMessageSignature), for a signer whose
// key is inlined in its peer ID (Ed25519).
func costCheckSignature(m *pspb.Message) error {
	pub, err := peer.ID(m.From).ExtractPublicKey()
	if err != nil {
		return err
	}
	xm := proto.CloneOf(m)
	xm.Signature, xm.Key = nil, nil
	buf, err := proto.Marshal(xm)
	if err != nil {
		return err
	}
	ok, err := pub.Verify(append([]byte(pubsub.SignPrefix), buf...), m.Signature)
	if err != nil || !ok {
		return fmt.Errorf("bad signature: %v", err)
	}
	return nil
}

// costAttempt is one measured operation: worker w's client attaches to ai
// (after closing its connection when fresh), detaches at once if
// accepted, and fails unless the answer is want.
func costAttempt(ctx context.Context, cs []*costClient, ai peer.AddrInfo, want pb.AttachResponse_Status, fresh bool) func(w int) error {
	return func(w int) error {
		c := cs[w]
		if fresh {
			_ = c.h.Network().ClosePeer(ai.ID)
		}
		st, s, err := c.attach(ctx, ai)
		if s != nil {
			s.detach()
		}
		switch {
		case err != nil:
			return err
		case st != want:
			return fmt.Errorf("answered %v, want %v", st, want)
		}
		return nil
	}
}
