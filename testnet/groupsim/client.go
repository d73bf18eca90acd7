package groupsim

import (
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/dedup"
	"github.com/overlayd/overlayd/overlay/member"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode/group"
)

// publishTimeout is how long a publisher waits for a result before it
// retries with the same ID.
const publishTimeout = 4 * time.Second

// clientDedupWindow is node/client's dedup window.
const clientDedupWindow = 8192

// client is a member or a publisher, as node/client behaves: it dedups by
// (group, epoch, seq) and by (from, id), keeps its cursor (the last
// position delivered), re-joins every group with its cursor on a new
// session, and retries a publish with the same ID until OK.
type client struct {
	s    *sim
	i    int
	id   string
	pid  peer.ID
	name string
	key  crypto.PrivKey
	// at is the supernode of the current session (nil between
	// sessions); sess numbers the sessions.
	at       *snode
	sess     int
	up, down link
	// mg decides deliveries, as node/client's does: the groups joined,
	// the position each resumes from, dedup (overlay/member).
	mg       *member.Groups
	claimSeq uint64
	pubs     map[string]*pub
	dropped  bool // DropOneDelivery done
}

// pub is a publish until it is acknowledged.
type pub struct {
	id       []byte
	g        string
	signed   []byte
	forged   bool
	first    time.Duration
	attempts int
	done     bool
}

func (s *sim) newClient(i int, name string) *client {
	key := s.newKey()
	pid, err := peer.IDFromPublicKey(key.GetPublic())
	if err != nil {
		panic(err)
	}
	c := &client{s: s, i: i, id: string(pid), pid: pid, name: name, key: key,
		up: link{lat: s.dur(200*time.Microsecond, 2*time.Millisecond)}, down: link{lat: s.dur(200*time.Microsecond, 2*time.Millisecond)},
		mg: member.New(dedup.New(clientDedupWindow)), pubs: map[string]*pub{}}
	s.cls = append(s.cls, c)
	s.cByID[c.id] = c
	return c
}

func sortedClients(m map[string]*client) []*client {
	out := make([]*client, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, m[k])
	}
	return out
}

// toNode sends a frame's effect to the session's supernode, in order;
// closing: delivered even though the session ends meanwhile (its end).
func (c *client) toNode(closing bool, fn func(n *snode)) {
	n := c.at
	if n == nil {
		return
	}
	sess, inc := c.sess, n.inc
	c.s.at(c.s.arrival(&c.up), func() {
		if !closing && (c.sess != sess || c.at != n) {
			return
		}
		n.event(inc, func() { fn(n) })
	})
}

// attach starts a session at n: it re-joins every group, resuming from
// its cursor, and sends again every publish not yet acknowledged.
func (c *client) attach(n *snode) {
	c.at = n
	c.sess++
	c.s.tracef(c.name, "attach %s", n.name)
	c.toNode(false, func(n *snode) { n.sessions[c.id] = c })
	for _, st := range c.mg.List() {
		g := st.Group
		op := c.groupOp(n, g, true)
		if p, ok := c.mg.Resume(g); ok {
			op.Resume, op.ResumeEpoch, op.ResumeSeq = true, p.Epoch, p.Seq
		}
		c.sendOp(op)
		c.sent(g)
	}
	for _, k := range sortedKeys(c.pubs) {
		if p := c.pubs[k]; !p.done {
			c.sendPublish(p)
		}
	}
}

func (c *client) sendOp(op *pb.GroupOp) {
	c.s.tracef(c.name, "op g=%s join=%v resume=%v %d.%d", op.GetGroup(), op.GetJoin(), op.GetResume(), op.GetResumeEpoch()%1000, op.GetResumeSeq())
	c.toNode(false, func(n *snode) { n.core.GroupOp(c.s.nowT(), c.id, op) })
}

// groupOp is the op joining or leaving g at n, with the signed claim.
func (c *client) groupOp(n *snode, g string, join bool) *pb.GroupOp {
	c.claimSeq = max(c.claimSeq+1, uint64(c.s.nowT().UnixNano()))
	claim, err := protocol.SignMembership(c.key, protocol.Membership{Group: g, Supernode: n.pid, Join: join, Seq: c.claimSeq})
	if err != nil {
		panic(err)
	}
	return &pb.GroupOp{Group: g, Join: join, Claim: claim}
}

// sessionLost: the supernode crashed; the client fails over after a
// while to another live supernode.
func (c *client) sessionLost(n *snode) {
	if c.at != n {
		return
	}
	c.at = nil
	c.sess++
	c.s.tracef(c.name, "session lost at %s", n.name)
	c.s.after(c.s.dur(200*time.Millisecond, 1500*time.Millisecond), c.failover)
}

func (c *client) failover() {
	if c.at != nil {
		return
	}
	up := c.s.upNodes()
	if len(up) == 0 {
		c.s.after(200*time.Millisecond, c.failover)
		return
	}
	c.s.fault(FaultFailover)
	n := up[c.s.rng.IntN(len(up))]
	c.attach(n)
	if c.s.on[FaultHomeFlap] && c.s.chance(0.5) {
		// While the member's resume is under way, its new supernode's
		// ring drops the group's home a moment.
		g := c.s.groups[c.s.rng.IntN(len(c.s.groups))]
		c.s.after(c.s.dur(0, 80*time.Millisecond), func() {
			if cl := c.s.trueCluster(g); len(cl) > 0 {
				c.s.flapPair(n, cl[0], c.s.dur(50*time.Millisecond, 300*time.Millisecond), FaultHomeFlap)
			}
		})
	}
}

// move ends the session in order and starts one at another supernode.
func (c *client) move() {
	old := c.at
	if old == nil {
		return
	}
	var others []*snode
	for _, n := range c.s.upNodes() {
		if n != old {
			others = append(others, n)
		}
	}
	if len(others) == 0 {
		return
	}
	c.s.fault(FaultMove)
	c.s.tracef(c.name, "detach %s", old.name)
	c.toNode(true, func(n *snode) {
		if n.sessions[c.id] == c {
			delete(n.sessions, c.id)
			n.core.Detached(c.s.nowT(), c.id)
		}
	})
	c.sess++
	c.attach(others[c.s.rng.IntN(len(others))])
}

// join and leave a group.
func (c *client) join(g string) {
	if c.mg.Joined(g) {
		return
	}
	c.mg.Join(g)
	c.s.chk.joined(c, g)
	if c.at != nil {
		c.sendOp(c.groupOp(c.at, g, true))
		c.sent(g)
	}
}

// sent records that g's join reached a session (member.Groups.Sent).
func (c *client) sent(g string) {
	if !c.s.p.Mutations.NoSentResume {
		c.mg.Sent(g)
	}
}

func (c *client) leave(g string) {
	if !c.mg.Joined(g) {
		return
	}
	c.mg.Leave(g)
	c.s.chk.left(c, g)
	if c.at != nil {
		c.sendOp(c.groupOp(c.at, g, false))
	}
}

// publish starts a publish to g; forged: signed by a key not the
// publisher's, which no home may number.
func (c *client) publish(g string, forged bool) {
	id := make([]byte, 16)
	for i := range id {
		id[i] = byte(c.s.rng.UintN(256))
	}
	key := c.key
	if forged {
		key = c.s.forgeKey
	}
	signed, err := protocol.SignPublish(key, g, id, fmt.Appendf(nil, "%s-%x", c.name, id[:4]))
	if err != nil {
		panic(err)
	}
	p := &pub{id: id, g: g, signed: signed, forged: forged, first: c.s.now}
	c.pubs[string(id)] = p
	c.s.chk.published(c, p)
	c.s.tracef(c.name, "publish g=%s %s forged=%v", g, c.s.pubName([]byte(c.id), id), forged)
	c.sendPublish(p)
}

// sendPublish sends an attempt; with no session it waits for the next
// (attach sends it).
func (c *client) sendPublish(p *pub) {
	if p.done || c.at == nil {
		return
	}
	if p.attempts >= c.s.p.MaxAttempts {
		p.done = true
		c.s.tracef(c.name, "publish g=%s %s given up", p.g, c.s.pubName([]byte(c.id), p.id))
		return
	}
	p.attempts++
	attempt := p.attempts
	gp := &pb.GroupPublish{Group: p.g, Id: p.id, Signed: p.signed}
	c.toNode(false, func(n *snode) { n.core.Publish(c.s.nowT(), c.id, gp) })
	c.s.after(publishTimeout, func() {
		if !p.done && p.attempts == attempt {
			c.s.tracef(c.name, "publish g=%s %s timed out", p.g, c.s.pubName([]byte(c.id), p.id))
			c.sendPublish(p)
		}
	})
}

// receive is a session frame from the supernode.
func (c *client) receive(f *pb.SessionFrame) {
	switch k := f.GetKind().(type) {
	case *pb.SessionFrame_GroupMessage:
		c.groupMessage(k.GroupMessage)
	case *pb.SessionFrame_Resumed:
		r := k.Resumed
		c.s.tracef(c.name, "resumed g=%s %d.%d missed=%d unknown=%v", r.GetGroup(), r.GetEpoch()%1000, r.GetSeq(), r.GetMissed(), r.GetMissedUnknown())
		if r.GetMissed() > 0 || r.GetMissedUnknown() {
			c.s.chk.gap(c, r.GetGroup())
		}
		c.mg.Start(r.GetGroup(), member.Pos{Epoch: r.GetEpoch(), Seq: r.GetSeq()})
	case *pb.SessionFrame_Result:
		c.result(k.Result)
	}
}

func (c *client) groupMessage(gm *pb.GroupMessage) {
	s := c.s
	g := gm.GetGroup()
	s.chk.raw(c, gm)
	if !c.mg.Joined(g) {
		return
	}
	if err := s.openGroupMessage(gm); err != nil {
		s.tracef(c.name, "refused %s: %v", s.gmString(gm), err)
		return
	}
	if !c.mg.Deliver(g, member.Pos{Epoch: gm.GetEpoch(), Seq: gm.GetSeq()}, gm.GetFrom(), gm.GetId()) {
		return
	}
	if s.p.DropOneDelivery && !c.dropped && c.i == 0 && s.now > 3*time.Second {
		c.dropped = true
		s.tracef(c.name, "TEST HOOK dropped %s", s.gmString(gm))
		return
	}
	s.tracef(c.name, "deliver %s", s.gmString(gm))
	s.chk.delivered(c, gm)
}

func (c *client) result(r *pb.Result) {
	p := c.pubs[string(r.GetId())]
	if p == nil || p.done {
		return
	}
	s := c.s
	s.tracef(c.name, "result g=%s %s %s %d.%d %s", p.g, s.pubName([]byte(c.id), p.id), r.GetStatus(), r.GetEpoch()%1000, r.GetSeq(), r.GetDetail())
	switch r.GetStatus() {
	case pb.Result_STATUS_OK:
		p.done = true
		s.chk.acked(c, p, group.Pos{Epoch: r.GetEpoch(), Seq: r.GetSeq()})
	case pb.Result_STATUS_BUSY, pb.Result_STATUS_UNREACHABLE:
		attempt := p.attempts
		s.after(s.dur(50*time.Millisecond, 250*time.Millisecond), func() {
			if !p.done && p.attempts == attempt {
				c.sendPublish(p)
			}
		})
	default:
		p.done = true
	}
}

// openGroupMessage is the client's check of a group message: stamped by
// a supernode that may be a home, signed by its publisher.
func (s *sim) openGroupMessage(gm *pb.GroupMessage) error {
	return s.verifier.OpenGroupMessage(gm, func(p string) bool { return s.byID[p] != nil })
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// hasPos reports whether the client has delivered a message of g.
func (c *client) hasPos(g string) bool {
	_, ok := c.mg.Resume(g)
	return ok
}
