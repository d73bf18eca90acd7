package testnet

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/metrics"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"

	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// A lightweight group member for the saturation benchmarks: one libp2p
// host (TCP, the default TLS/Noise security and yamux, no listen address)
// per member, which speaks the client side of the attach protocol
// (protocol/doc.go, "Attach handshake" and "Attach session") and nothing
// else: it attaches to one given supernode with a signed PresenceClaim,
// joins the group with a signed GroupOp, pings every keepalive, publishes
// signed GroupPublish frames when asked to, and reads its session,
// recording every GroupMessage (its payload's publish index and send
// time, its epoch and seq) and checking the order. It does NOT verify the
// publisher's signature or the home's stamp on group messages, as a real
// client does (protocol.OpenGroupMessage): two Ed25519 verifications per
// delivery would cost the member process more than the supernodes' whole
// work and cap the rate it can absorb on its one core. It has no directory,
// no GossipSub, no failover: a session that ends stays ended (counted).

// satMember is one lightweight member.
type satMember struct {
	i   int
	key crypto.PrivKey
	id  peer.ID
	h   host.Host
	sn  peer.AddrInfo

	wmu sync.Mutex // serialises writes on s
	s   network.Stream
	ka  time.Duration

	mu      sync.Mutex
	got     []satDelivery
	pending map[string]chan *pb.Result // publish or members id → answer
	members chan *pb.Members

	// Counted by the reader; read by the harness.
	outOfOrder, dups atomic.Int64
	gaps             atomic.Uint64
	ended            atomic.Bool
	endErr           atomic.Value // string
}

// satDelivery is one group message as a member read it.
type satDelivery struct {
	idx        uint64
	epoch, seq uint64
	lat        time.Duration
}

// satNewMember starts a member's host. bwc, when not nil, counts its
// bytes.
func satNewMember(i int, bwc *metrics.BandwidthCounter) (*satMember, error) {
	k, id, err := msgKey()
	if err != nil {
		return nil, err
	}
	opts := []libp2p.Option{
		libp2p.Identity(k), libp2p.NoListenAddrs, libp2p.Transport(tcp.NewTCPTransport),
		libp2p.DisableRelay(), libp2p.DisableMetrics(),
	}
	if bwc != nil {
		opts = append(opts, libp2p.BandwidthReporter(bwc))
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		return nil, err
	}
	return &satMember{i: i, key: k, id: id, h: h, pending: map[string]chan *pb.Result{}, members: make(chan *pb.Members, 1)}, nil
}

// attach runs the handshake with sn and starts the session's reader and
// keepalive; t0 is the time the payloads' send times count from.
func (m *satMember) attach(ctx context.Context, sn peer.AddrInfo, t0 time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m.h.Peerstore().AddAddrs(sn.ID, sn.Addrs, time.Hour)
	s, err := m.h.NewStream(ctx, sn.ID, protocol.AttachID)
	if err != nil {
		return fmt.Errorf("member %d: open: %w", m.i, err)
	}
	dl, _ := ctx.Deadline()
	_ = s.SetDeadline(dl)
	seq := uint64(time.Now().UnixNano())
	claim, err := protocol.SignPresence(m.key, sn.ID, seq)
	if err == nil {
		err = protocol.WriteFrame(s, &pb.AttachRequest{ProtocolVersion: protocol.Version, Reason: pb.AttachRequest_REASON_INITIAL, SessionSeq: seq, Presence: claim})
	}
	fr := protocol.NewFrameReader(s, protocol.MaxSessionFrame)
	var resp pb.AttachResponse
	if err == nil {
		err = fr.Read(&resp)
	}
	if err != nil {
		s.Reset()
		return fmt.Errorf("member %d: handshake: %w", m.i, err)
	}
	if resp.GetStatus() != pb.AttachResponse_STATUS_ACCEPT {
		s.Close()
		return fmt.Errorf("member %d: %v %q", m.i, resp.GetStatus(), resp.GetReason())
	}
	_ = s.SetDeadline(time.Time{})
	m.wmu.Lock()
	m.s, m.sn, m.ka = s, sn, time.Duration(resp.GetKeepaliveMs())*time.Millisecond
	m.wmu.Unlock()
	m.ended.Store(false)
	go m.read(s, fr, t0)
	go m.keepalive(s)
	return nil
}

// write writes one session frame.
func (m *satMember) write(f *pb.SessionFrame) error {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	if m.s == nil {
		return errors.New("no session")
	}
	_ = m.s.SetWriteDeadline(time.Now().Add(max(m.ka, time.Second)))
	return protocol.WriteFrame(m.s, f)
}

// end marks the session ended for reason.
func (m *satMember) end(s network.Stream, why string) {
	if m.ended.CompareAndSwap(false, true) {
		m.endErr.Store(why)
	}
	s.Reset()
}

// keepalive pings every keepalive until the session ends.
func (m *satMember) keepalive(s network.Stream) {
	t := time.NewTicker(m.ka)
	defer t.Stop()
	var seq uint64
	for range t.C {
		if m.ended.Load() {
			return
		}
		seq++
		if err := m.write(&pb.SessionFrame{Kind: &pb.SessionFrame_Ping{Ping: &pb.Ping{Seq: seq}}}); err != nil {
			m.end(s, "ping: "+err.Error())
			return
		}
	}
}

// read reads the session until it ends.
func (m *satMember) read(s network.Stream, fr *protocol.FrameReader, t0 time.Time) {
	var f pb.SessionFrame
	var lastEpoch, lastSeq uint64 // the session's last group message
	for {
		f.Reset()
		if err := fr.Read(&f); err != nil {
			m.end(s, "read: "+err.Error())
			return
		}
		switch k := f.GetKind().(type) {
		case *pb.SessionFrame_GroupMessage:
			gm := k.GroupMessage
			now := time.Since(t0)
			sent, idx, ok := satPayloadOf(gm.GetPublish())
			if !ok {
				continue
			}
			e, q := gm.GetEpoch(), gm.GetSeq()
			switch {
			case e == lastEpoch && q == lastSeq:
				m.dups.Add(1)
				continue
			case e == lastEpoch && q < lastSeq:
				m.outOfOrder.Add(1)
			}
			lastEpoch, lastSeq = e, q
			m.mu.Lock()
			m.got = append(m.got, satDelivery{idx: idx, epoch: e, seq: q, lat: now - sent})
			m.mu.Unlock()
		case *pb.SessionFrame_Gap:
			m.gaps.Add(k.Gap.GetDropped())
		case *pb.SessionFrame_Result:
			m.mu.Lock()
			ch := m.pending[string(k.Result.GetId())]
			delete(m.pending, string(k.Result.GetId()))
			m.mu.Unlock()
			if ch != nil {
				ch <- k.Result
			}
		case *pb.SessionFrame_Members:
			select {
			case m.members <- k.Members:
			default:
			}
		case *pb.SessionFrame_Detach:
			m.end(s, "detached: "+k.Detach.GetReason())
			return
		}
	}
}

// satPayloadOf reads the send time and index from a group message's
// publish envelope, whose PublishClaim carries the payload: the member
// does not verify the envelope (see above), it finds the payload by its
// marker.
func satPayloadOf(publish []byte) (time.Duration, uint64, bool) {
	i := indexMarker(publish)
	if i < 0 {
		return 0, 0, false
	}
	return msgParsePayload(publish[i+len(satMarker):])
}

// satMarker starts every saturation payload: 8 bytes that a signed
// envelope does not otherwise contain, so that a member finds its payload
// without decoding the envelope.
var satMarker = []byte("\x00SATPL\xff\x00")

func indexMarker(b []byte) int { return bytes.Index(b, satMarker) }

// satPayload is a 128-byte payload: the marker, then msgPayload's send
// time and index.
func satPayload(sent time.Duration, idx uint64) []byte {
	p := msgPayload(sent, idx)
	return append(append([]byte{}, satMarker...), p[:msgPayloadSize-len(satMarker)]...)
}

// join sends a signed GroupOp{join}.
func (m *satMember) join(group string) error {
	claim, err := protocol.SignMembership(m.key, protocol.Membership{Group: group, Supernode: m.sn.ID, Join: true, Seq: uint64(time.Now().UnixNano())})
	if err != nil {
		return err
	}
	return m.write(&pb.SessionFrame{Kind: &pb.SessionFrame_GroupOp{GroupOp: &pb.GroupOp{Group: group, Join: true, Claim: claim}}})
}

// publish publishes payload to group and waits for the answer.
func (m *satMember) publish(ctx context.Context, group string, payload []byte, timeout time.Duration) (*pb.Result, error) {
	id := make([]byte, protocol.MessageIDLen)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	signed, err := protocol.SignPublish(m.key, group, id, payload)
	if err != nil {
		return nil, err
	}
	ch := make(chan *pb.Result, 1)
	m.mu.Lock()
	m.pending[string(id)] = ch
	m.mu.Unlock()
	defer func() { m.mu.Lock(); delete(m.pending, string(id)); m.mu.Unlock() }()
	if err := m.write(&pb.SessionFrame{Kind: &pb.SessionFrame_Publish{Publish: &pb.GroupPublish{Group: group, Id: id, Signed: signed}}}); err != nil {
		return nil, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		if r.GetStatus() != pb.Result_STATUS_OK {
			return r, fmt.Errorf("publish: %v %s", r.GetStatus(), r.GetDetail())
		}
		return r, nil
	case <-t.C:
		return nil, errors.New("publish: no answer in " + timeout.String())
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// countMembers asks the member's supernode for the group's members.
func (m *satMember) countMembers(ctx context.Context, group string) (int, error) {
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	if err := m.write(&pb.SessionFrame{Kind: &pb.SessionFrame_MembersRequest{MembersRequest: &pb.MembersRequest{Id: id, Group: group}}}); err != nil {
		return 0, err
	}
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case ms := <-m.members:
			if string(ms.GetId()) != string(id) {
				continue
			}
			if ms.GetError() != "" {
				return 0, errors.New(ms.GetError())
			}
			return len(ms.GetMembers()), nil
		case <-t.C:
			return 0, errors.New("members: no answer")
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// take returns and clears the deliveries read so far.
func (m *satMember) take() []satDelivery {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.got
	m.got = nil
	return g
}

func (m *satMember) close() {
	m.wmu.Lock()
	s := m.s
	m.wmu.Unlock()
	if s != nil {
		m.end(s, "closed")
	}
	m.h.Close()
}

// ---- /proc readings.

// satProcCPU returns a process's user + system CPU time from
// /proc/<pid>/stat ("self" for this one), in clock ticks' resolution.
func satProcCPU(pid string) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+st) * time.Second / userHZ, true
}

// satProcIO returns the bytes a process passed to read and write system
// calls (/proc/<pid>/io rchar, wchar): on a process that touches no files
// in the window, its socket traffic — TLS records and yamux headers
// included, TCP/IP headers not.
func satProcIO(pid string) (rchar, wchar uint64, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/io")
	if err != nil {
		return 0, 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, found := strings.Cut(line, ":")
		if !found {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "rchar":
			rchar = n
		case "wchar":
			wchar = n
		}
	}
	return rchar, wchar, true
}
