package groupsim

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode"
	"github.com/overlayd/overlayd/supernode/group"
)

// maxInflight bounds a link's frames in flight: a send past it is refused,
// as a full stream queue is.
const maxInflight = 4096

// link is one ordered connection: frames arrive in the order sent, after
// the link's latency plus jitter. A reset (either end crashed) drops what
// is in flight. A stale link is one a partition killed: the first frame
// sent on it after the heal is lost, as the shell's first write into the
// dead connection is (the write fails, or the other end resets the
// stream, and the frame is gone); the next goes on a new connection.
type link struct {
	lat      time.Duration
	last     time.Duration // arrival of the last frame sent
	gen      int
	inflight int
	stale    bool
	// open: the receiver accepted the link's stream. A supernode resets
	// a relay stream from a peer its directory does not list as a
	// supernode (supernode.Router's handleRelay), so the first frame on
	// a new stream is refused, with what follows it in flight, while the
	// receiver's view lacks the sender: after a heal, a restart or a
	// flap. An accepted stream stays open when the view changes later.
	open bool
}

func (l *link) reset() {
	l.gen++
	l.inflight = 0
	l.stale = false
	l.open = false
}

// arrival is when a frame sent now arrives: after the latency and some
// jitter, never before the frame sent before it.
func (s *sim) arrival(l *link) time.Duration {
	t := s.now + l.lat + s.dur(0, time.Millisecond)
	if t < l.last {
		t = l.last
	}
	l.last = t
	return t
}

// send queues a frame from n to supernode to. It fails only when the link
// is full, as the shell's links do: a frame to a supernode that is down is
// queued and lost (the shell's write fails), whatever n's ring says.
func (n *snode) send(to string, f *pb.RelayFrame) bool {
	o := n.s.byID[to]
	if o == nil || o == n {
		return false
	}
	l := n.links[o.i]
	if l.inflight >= maxInflight {
		return false
	}
	f = proto.CloneOf(f) // what the wire would carry
	if r := f.GetReplica(); r != nil {
		n.s.diag.replica(n.s, n, r)
	}
	if n.s.across(n, o) {
		n.s.tracef(n.name, "send %s %s LOST (partition)", o.name, n.s.frameString(f))
		return true // written to a connection that is dead and not yet noticed
	}
	if l.stale {
		l.stale = false
		n.s.tracef(n.name, "send %s %s LOST (the connection the partition killed)", o.name, n.s.frameString(f))
		return true
	}
	n.s.tracef(n.name, "send %s %s", o.name, n.s.frameString(f))
	n.transmit(o, l, f, false)
	return true
}

func (n *snode) transmit(o *snode, l *link, f *pb.RelayFrame, dup bool) {
	l.inflight++
	gen, inc, oinc := l.gen, n.inc, o.inc
	n.s.at(n.s.arrival(l), func() {
		if l.gen != gen || !n.alive(inc) || !o.alive(oinc) {
			return
		}
		if !l.open {
			if o.view&(1<<n.i) == 0 {
				n.s.tracef(o.name, "recv %s %s REFUSED (not in its directory: the stream is reset)", n.name, n.s.frameString(f))
				l.reset()
				return
			}
			l.open = true
		}
		l.inflight--
		if !dup && n.s.on[FaultDup] && n.s.chance(n.s.dupP) {
			// Delivered again, as a frame resent after a reconnect.
			n.s.fault(FaultDup)
			n.transmit(o, l, proto.CloneOf(f), true)
		}
		o.receive(n, f)
	})
}

// receive is a frame from supernode from, handed to the core's event for
// its kind.
func (n *snode) receive(from *snode, f *pb.RelayFrame) {
	s := n.s
	now := s.nowT()
	s.tracef(n.name, "recv %s %s", from.name, s.frameString(f))
	c := n.core
	switch k := f.GetKind().(type) {
	case *pb.RelayFrame_Publish:
		c.HomePublish(now, k.Publish)
	case *pb.RelayFrame_Membership:
		s.diag.membership(s, n, from, k.Membership)
		c.Membership(now, from.id, k.Membership)
		s.chk.forgedApplied(n)
	case *pb.RelayFrame_GroupMessage:
		c.GroupMessage(now, from.id, k.GroupMessage)
	case *pb.RelayFrame_ReplayDone:
		c.ReplayDone(now, from.id, k.ReplayDone)
	case *pb.RelayFrame_Replica:
		c.Replica(from.id, k.Replica)
	case *pb.RelayFrame_ReplicaAck:
		c.ReplicaAck(from.id, k.ReplicaAck)
	case *pb.RelayFrame_ReplicaSync:
		c.ReplicaSync(now, from.id, k.ReplicaSync)
	case *pb.RelayFrame_PublishResult:
		if cl := n.sessions[string(k.PublishResult.GetTo())]; cl != nil {
			n.toClient(cl, &pb.SessionFrame{Kind: &pb.SessionFrame_Result{Result: k.PublishResult.GetResult()}})
		}
	}
	n.afterEvent()
}

// toClient queues a session frame to an attached client, on the
// session's ordered link.
func (n *snode) toClient(c *client, f *pb.SessionFrame) {
	sess, inc := c.sess, n.inc
	s := n.s
	s.at(s.arrival(&c.down), func() {
		if c.sess != sess || c.at != n || !n.alive(inc) {
			return
		}
		c.receive(f)
	})
}

// frameString is a short form of a relay frame for the trace.
func (s *sim) frameString(f *pb.RelayFrame) string {
	switch k := f.GetKind().(type) {
	case *pb.RelayFrame_Publish:
		return fmt.Sprintf("Publish g=%s %s", k.Publish.GetGroup(), s.pubName(k.Publish.GetFrom(), k.Publish.GetId()))
	case *pb.RelayFrame_Membership:
		out := "Membership"
		for _, r := range k.Membership.GetRecords() {
			flag := ""
			if r.GetRefresh() {
				flag += "r"
			}
			if r.GetResume() {
				flag += fmt.Sprintf("R%d.%d", r.GetResumeEpoch()%1000, r.GetResumeSeq())
			}
			if r.GetSupernodeResume() {
				flag += "S"
			}
			out += fmt.Sprintf(" [g=%s %s j=%v %s]", r.GetGroup(), s.short(string(r.GetMember())), r.GetJoin(), flag)
		}
		return out
	case *pb.RelayFrame_GroupMessage:
		return "GM " + s.gmString(k.GroupMessage)
	case *pb.RelayFrame_ReplayDone:
		r := k.ReplayDone.GetResumed()
		return fmt.Sprintf("ReplayDone g=%s %s at %d.%d missed=%d unknown=%v", r.GetGroup(), s.short(string(k.ReplayDone.GetMember())), r.GetEpoch()%1000, r.GetSeq(), r.GetMissed(), r.GetMissedUnknown())
	case *pb.RelayFrame_Replica:
		return "Replica " + s.gmString(k.Replica)
	case *pb.RelayFrame_ReplicaAck:
		a := k.ReplicaAck
		return fmt.Sprintf("ReplicaAck g=%s %d.%d", a.GetGroup(), a.GetEpoch()%1000, a.GetSeq())
	case *pb.RelayFrame_ReplicaSync:
		y := k.ReplicaSync
		return fmt.Sprintf("ReplicaSync g=%s after %d.%d done=%v", y.GetGroup(), y.GetEpoch()%1000, y.GetAfterSeq(), y.GetDone())
	case *pb.RelayFrame_PublishResult:
		r := k.PublishResult.GetResult()
		return fmt.Sprintf("Result %s %s %d.%d", s.short(string(k.PublishResult.GetTo())), r.GetStatus(), r.GetEpoch()%1000, r.GetSeq())
	}
	return "?"
}

func (s *sim) gmString(gm *pb.GroupMessage) string {
	only := ""
	if len(gm.GetOnly()) > 0 {
		only = " only=" + s.short(string(gm.GetOnly()))
	}
	return fmt.Sprintf("g=%s %d.%d %s%s", gm.GetGroup(), gm.GetEpoch()%1000, gm.GetSeq(), s.pubName(gm.GetFrom(), gm.GetId()), only)
}

// pubName names a publish by its publisher and the first bytes of its ID.
func (s *sim) pubName(from, id []byte) string {
	if len(id) < 2 {
		return s.short(string(from)) + "/?"
	}
	return fmt.Sprintf("%s/%x", s.short(string(from)), id[:3])
}

// memoVerifier is supernode.GroupVerifier, remembering what it checked:
// the same bytes checked again give the same answer (ed25519 is
// deterministic), and a run checks each message at every supernode.
type memoVerifier struct {
	v     supernode.GroupVerifier
	memo  map[string]error
	claim map[string]claimResult
	open  map[string]openResult
	homes []string // every supernode, in order
}

type claimResult struct {
	c   group.Claim
	err error
}

var _ group.Verifier = (*memoVerifier)(nil)

func newMemoVerifier() *memoVerifier {
	return &memoVerifier{memo: map[string]error{}, claim: map[string]claimResult{}, open: map[string]openResult{}}
}

func (m *memoVerifier) remember(key string, f func() error) error {
	if err, ok := m.memo[key]; ok {
		return err
	}
	err := f()
	m.memo[key] = err
	return err
}

func (m *memoVerifier) VerifyPublish(signed []byte, from, g string, id []byte) error {
	return m.remember("p\x00"+string(signed)+"\x00"+from+"\x00"+g+"\x00"+string(id), func() error {
		return m.v.VerifyPublish(signed, from, g, id)
	})
}

func (m *memoVerifier) VerifyMembership(claim []byte, member, g string) (group.Claim, error) {
	key := string(claim) + "\x00" + member + "\x00" + g
	if r, ok := m.claim[key]; ok {
		return r.c, r.err
	}
	c, err := m.v.VerifyMembership(claim, member, g)
	m.claim[key] = claimResult{c, err}
	return c, err
}

func (m *memoVerifier) VerifyStamp(gm *pb.GroupMessage, home string) error {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(gm)
	if err != nil {
		return err
	}
	return m.remember("s\x00"+string(b)+"\x00"+home, func() error {
		return m.v.VerifyStamp(gm, home)
	})
}

// OpenGroupMessage checks once per message, noting the stamp's signer,
// then asks isHome about the signer (protocol.OpenGroupMessage asks it
// exactly that, once). The stamp and the publisher's signature checked
// before, by VerifyStamp and VerifyPublish, are not checked again.
func (m *memoVerifier) OpenGroupMessage(gm *pb.GroupMessage, isHome func(string) bool) error {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(gm)
	if err != nil {
		return err
	}
	key := "o\x00" + string(b)
	r, ok := m.open[key]
	if !ok {
		pubKey := "p\x00" + string(gm.GetPublish()) + "\x00" + string(gm.GetFrom()) + "\x00" + gm.GetGroup() + "\x00" + string(gm.GetId())
		for _, h := range m.homes {
			if err, ok := m.memo["s\x00"+string(b)+"\x00"+h]; ok && err == nil {
				if perr, known := m.memo[pubKey]; known {
					r, ok = openResult{signer: h, err: perr}, true
				}
				break
			}
		}
		if !ok {
			r.err = m.v.OpenGroupMessage(gm, func(p string) bool { r.signer = p; return true })
		}
		m.open[key] = r
	}
	if r.err != nil {
		return r.err
	}
	if !isHome(r.signer) {
		return errNotHome
	}
	return nil
}

type openResult struct {
	signer string
	err    error
}

var errNotHome = errors.New("groupsim: group message stamped by a supernode that is not a home of the group")
