package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/dedup"
	"github.com/overlayd/overlayd/overlay/member"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// Messaging defaults.
const (
	// sendAttempts: a direct message is sent up to sendAttempts times,
	// waiting Config.AckTimeout for its ack each time.
	sendAttempts = 4
	// dedupWindow is how many recent message keys a client remembers to
	// drop duplicates.
	dedupWindow = 8192
	// listenBuffer is how many inbound messages a slow local listener may
	// fall behind before it misses some (counted in a "gap" message).
	listenBuffer = 1024
)

// Kinds of Inbound message.
const (
	KindDirect = "direct"
	KindGroup  = "group"
	// KindGap reports Dropped messages this listener (or the supernode's
	// outbox for this client) missed.
	KindGap = "gap"
)

// Inbound is one message delivered to this node, as local listeners see it.
type Inbound struct {
	Kind    string // KindDirect, KindGroup or KindGap
	From    peer.ID
	Group   string
	Epoch   uint64 // group messages: the home's epoch
	Seq     uint64 // group messages: the sequence number within Epoch
	ID      []byte // message ID
	Payload []byte
	Dropped uint64 // gap: how many messages were missed
	// Unknown (gap): the group's home could not count what was missed
	// (its log starts after the member's last message): at least Dropped.
	Unknown bool
	// Sent is when the sender says it sent a direct message (signed by
	// the sender, but its clock); zero for other kinds.
	Sent time.Time
	// Time is when this client received the message.
	Time time.Time
}

// PublishResult is the group home's answer to a publish.
type PublishResult struct {
	ID    []byte
	Epoch uint64
	Seq   uint64
}

// outcome is what answered a pending request: an ack, or a result.
type outcome struct {
	acked  bool
	result *pb.Result
}

// pending is a request waiting for its answer. to is the recipient of a
// direct message, whose signature an ack must carry ("" for a publish).
type pending struct {
	ch chan outcome
	to peer.ID
}

// messenger is the client's messaging state. Frames it receives come from
// the session goroutine (handle); requests come from any goroutine.
type messenger struct {
	c *Client

	mu      sync.Mutex
	pending map[string]pending
	members map[string]chan *pb.Members
	subs    map[*Listener]struct{}
	seen    *dedup.Window
	// groups are the groups joined, the last message delivered in each
	// (a new session resumes each group from it) and their dedup, in
	// seen (overlay/member decides).
	groups *member.Groups
	// claimSeq is the seq of the newest membership claim signed.
	claimSeq uint64
}

func (m *messenger) init(c *Client) {
	m.c = c
	m.pending = map[string]pending{}
	m.members = map[string]chan *pb.Members{}
	m.subs = map[*Listener]struct{}{}
	m.seen = dedup.New(dedupWindow)
	m.groups = member.New(m.seen)
}

// Listener receives inbound messages; see Client.Listen.
type Listener struct {
	// C delivers the messages; it is closed by Close.
	C       <-chan Inbound
	c       chan Inbound
	dropped uint64
	m       *messenger
}

// Close stops the listener and closes C once the messages already in it
// are read. It is idempotent.
func (l *Listener) Close() {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	if _, ok := l.m.subs[l]; ok {
		delete(l.m.subs, l)
		close(l.c)
	}
}

// Listen returns a listener for inbound direct and group messages. A
// listener that falls listenBuffer messages behind misses the newest ones
// (and gets a KindGap message when it catches up); it never slows the
// client.
func (c *Client) Listen() *Listener {
	ch := make(chan Inbound, listenBuffer)
	l := &Listener{C: ch, c: ch, m: &c.msg}
	c.msg.mu.Lock()
	c.msg.subs[l] = struct{}{}
	c.msg.mu.Unlock()
	return l
}

func (m *messenger) publishLocal(in Inbound) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for l := range m.subs {
		if l.dropped > 0 {
			select {
			case l.c <- Inbound{Kind: KindGap, Dropped: l.dropped, Time: in.Time}:
				l.dropped = 0
			default:
				l.dropped++
				continue
			}
		}
		select {
		case l.c <- in:
		default:
			l.dropped++
		}
	}
}

// duplicate records key and reports whether it was seen recently.
func (m *messenger) duplicate(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seen.Seen(key)
}

// write sends a frame on the current session.
func (m *messenger) write(f *pb.SessionFrame) error {
	sess := m.c.current()
	if sess == nil {
		return ErrNotAttached
	}
	return sess.write(m.c.now(), f)
}

// handle takes the messaging frames of a session.
func (m *messenger) handle(sess *session, f *pb.SessionFrame) {
	now := m.c.now()
	switch k := f.GetKind().(type) {
	case *pb.SessionFrame_Deliver:
		d := k.Deliver
		from, err := peer.IDFromBytes(d.GetFrom())
		if err != nil {
			m.c.m.refused.WithLabelValues(refusedSignature).Inc()
			return
		}
		// Believe nothing the supernode says about the message: only the
		// sender's signature and the seal. A forgery is neither acked nor
		// delivered, so the real sender's retries are unaffected.
		payload, sent, err := protocol.OpenDirect(m.c.key, from, d.GetId(), d.GetSealed())
		if err != nil {
			m.c.m.refused.WithLabelValues(refusalReason(err)).Inc()
			m.c.log.Debug("direct message refused", "from", from.ShortString(), "err", err)
			return
		}
		// Ack, duplicates too: the sender may have missed our ack.
		signed, err := protocol.SignAck(m.c.key, from, d.GetId())
		if err == nil {
			_ = sess.write(now, &pb.SessionFrame{Kind: &pb.SessionFrame_Ack{Ack: &pb.Ack{
				Id: d.GetId(), From: []byte(m.c.h.ID()), To: d.GetFrom(), Origin: d.GetOrigin(), Signed: signed,
			}}})
		}
		if m.duplicate("d/" + string(d.GetFrom()) + "/" + string(d.GetId())) {
			return
		}
		m.publishLocal(Inbound{Kind: KindDirect, From: from, ID: d.GetId(), Payload: payload, Sent: sent, Time: now})
	case *pb.SessionFrame_GroupMessage:
		g := k.GroupMessage
		m.mu.Lock()
		joined := m.groups.Joined(g.GetGroup())
		m.mu.Unlock()
		if !joined {
			// A supernode kept us in a group we left, or made one up.
			m.c.m.refused.WithLabelValues(refusedNotMember).Inc()
			return
		}
		// Believe the payload only from its publisher, and the number
		// only from a supernode that may be the group's home: the home by
		// this client's ring, or, since rings disagree for a while when
		// supernodes come and go, another live supernode of its
		// directory. The supernode that fanned the message out checked
		// it came from the home by its own ring. A supernode that is not
		// the home can at most renumber genuine publishes, and a
		// publish's ID is delivered once.
		payload, err := protocol.OpenGroupMessage(g, m.c.mayBeHome(g.GetGroup()))
		if err != nil {
			m.c.m.refused.WithLabelValues(refusedGroup).Inc()
			m.c.log.Debug("group message refused", "group", g.GetGroup(), "err", err)
			return
		}
		m.mu.Lock()
		deliver := m.groups.Deliver(g.GetGroup(), member.Pos{Epoch: g.GetEpoch(), Seq: g.GetSeq()}, g.GetFrom(), g.GetId())
		m.mu.Unlock()
		if !deliver {
			return
		}
		from, _ := peer.IDFromBytes(g.GetFrom())
		m.publishLocal(Inbound{Kind: KindGroup, Group: g.GetGroup(), Epoch: g.GetEpoch(), Seq: g.GetSeq(), From: from,
			ID: g.GetId(), Payload: payload, Time: now})
	case *pb.SessionFrame_Gap:
		m.publishLocal(Inbound{Kind: KindGap, Dropped: k.Gap.GetDropped(), Time: now})
	case *pb.SessionFrame_Resumed:
		// The home replayed what this client missed; what its log no
		// longer held is a gap, never silence. At a fresh join it is
		// where the supernode stood: where a session lost before the
		// first message resumes from.
		res := k.Resumed
		m.mu.Lock()
		m.groups.Start(res.GetGroup(), member.Pos{Epoch: res.GetEpoch(), Seq: res.GetSeq()})
		m.mu.Unlock()
		m.c.m.resumes.Inc()
		if member.Gap(res.GetMissed(), res.GetMissedUnknown()) {
			m.c.m.resumeGaps.Inc()
			m.publishLocal(Inbound{Kind: KindGap, Group: res.GetGroup(), Dropped: res.GetMissed(), Unknown: res.GetMissedUnknown(), Time: now})
		}
	case *pb.SessionFrame_Ack:
		m.ack(k.Ack)
	case *pb.SessionFrame_Result:
		m.resolve(k.Result.GetId(), outcome{result: k.Result})
	case *pb.SessionFrame_Members:
		m.mu.Lock()
		ch := m.members[string(k.Members.GetId())]
		m.mu.Unlock()
		if ch != nil {
			select {
			case ch <- k.Members:
			default:
			}
		}
	}
}

func (m *messenger) resolve(id []byte, o outcome) {
	m.mu.Lock()
	p, ok := m.pending[string(id)]
	m.mu.Unlock()
	if ok {
		select {
		case p.ch <- o:
		default:
		}
	}
}

// ack resolves a direct message with its recipient's signed ack; an ack
// the recipient did not sign (forged by a supernode to claim a delivery it
// never made) is counted and ignored.
func (m *messenger) ack(a *pb.Ack) {
	m.mu.Lock()
	p, ok := m.pending[string(a.GetId())]
	m.mu.Unlock()
	if !ok || p.to == "" {
		return
	}
	if err := protocol.VerifyAck(a.GetSigned(), p.to, m.c.h.ID(), a.GetId()); err != nil {
		m.c.m.refused.WithLabelValues(refusedAck).Inc()
		m.c.log.Debug("ack refused", "recipient", p.to.ShortString(), "err", err)
		return
	}
	select {
	case p.ch <- outcome{acked: true}:
	default:
	}
}

// sessionStarted re-joins the client's groups on a new session.
func (m *messenger) sessionStarted(sess *session) {
	m.mu.Lock()
	groups := m.groups.List()
	m.mu.Unlock()
	for _, st := range groups {
		g := st.Group
		if op, err := m.groupOp(sess.peer, g, true); err == nil {
			m.mu.Lock()
			if p, ok := m.groups.Resume(g); ok {
				// Resume from the last message delivered: the home
				// replays what came after it before live traffic.
				op.GetGroupOp().Resume, op.GetGroupOp().ResumeEpoch, op.GetGroupOp().ResumeSeq = true, p.Epoch, p.Seq
			}
			m.mu.Unlock()
			if sess.write(m.c.now(), op) == nil {
				m.mu.Lock()
				m.groups.Sent(g)
				m.mu.Unlock()
			}
		}
	}
}

// groupOp is the frame that joins or leaves group at supernode sn, with
// the client's signed claim: the group's home applies no membership the
// member did not sign for that supernode.
func (m *messenger) groupOp(sn peer.ID, group string, join bool) (*pb.SessionFrame, error) {
	m.mu.Lock()
	m.claimSeq = max(m.claimSeq+1, uint64(max(m.c.now().UnixNano(), 1)))
	seq := m.claimSeq
	m.mu.Unlock()
	claim, err := protocol.SignMembership(m.c.key, protocol.Membership{Group: group, Supernode: sn, Join: join, Seq: seq})
	if err != nil {
		return nil, err
	}
	return &pb.SessionFrame{Kind: &pb.SessionFrame_GroupOp{GroupOp: &pb.GroupOp{Group: group, Join: join, Claim: claim}}}, nil
}

// statusErr maps a Result's status to the package's errors.
func statusErr(r *pb.Result) error {
	var base error
	switch r.GetStatus() {
	case pb.Result_STATUS_OK, pb.Result_STATUS_STORED:
		return nil
	case pb.Result_STATUS_OFFLINE:
		base = ErrOffline
	case pb.Result_STATUS_UNREACHABLE:
		base = ErrUnreachable
	case pb.Result_STATUS_BUSY:
		base = ErrBusy
	case pb.Result_STATUS_INVALID:
		base = ErrInvalid
	case pb.Result_STATUS_OVER_QUOTA:
		base = ErrOverQuota
	default:
		base = fmt.Errorf("status %v", r.GetStatus())
	}
	if r.GetDetail() == "" {
		return base
	}
	return fmt.Errorf("%w (%s)", base, r.GetDetail())
}

// request writes f (built for id) and waits for its outcome, retrying up
// to attempts times on a missing answer or a transient refusal. The same
// id is reused, so the recipient drops duplicates.
func (m *messenger) request(ctx context.Context, id []byte, to peer.ID, attempts int, f *pb.SessionFrame) (*pb.Result, error) {
	ch := make(chan outcome, 4)
	m.mu.Lock()
	m.pending[string(id)] = pending{ch: ch, to: to}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.pending, string(id))
		m.mu.Unlock()
	}()
	wait := m.c.cfg.AckTimeout
	var last error = ErrNoAck
	for range attempts {
		if err := m.write(f); err != nil {
			last = err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case o := <-ch:
			t.Stop()
			if o.acked {
				return &pb.Result{Id: id, Status: pb.Result_STATUS_OK}, nil
			}
			err := statusErr(o.result)
			if err == nil {
				return o.result, nil
			}
			if errors.Is(err, ErrInvalid) || errors.Is(err, ErrOverQuota) {
				return nil, err
			}
			last = err
			// Transient: the recipient may be re-attaching. Wait before
			// the next attempt rather than hammering.
			if !sleep(ctx, wait/2) {
				return nil, ctx.Err()
			}
		case <-t.C:
		}
	}
	return nil, last
}

// SendResult is the outcome of a Send that succeeded.
type SendResult struct {
	// ID is the message ID.
	ID []byte
	// Stored: the recipient was not attached anywhere, and a majority of
	// its home cluster stored the message on disk; it is delivered when
	// the recipient attaches (unless it expires first). Otherwise the
	// recipient acked it.
	Stored bool
	// Detail is the supernode's word on a stored message (how long the
	// home cluster keeps it), for people.
	Detail string
}

// Send delivers payload to peer to and waits for the recipient's ack, or
// for its home cluster to store it while it is offline (Stored). The
// payload is sealed to the recipient and signed (protocol.SealDirect): the
// supernodes on the way cannot read or alter it, and only an ack the
// recipient signed counts. It retries on timeout with the same message ID
// (the recipient drops duplicates, the replicas store one copy). It
// returns the message ID (on failure too, when one was chosen), and on
// failure an error wrapping ErrOffline, ErrOverQuota, ErrUnreachable,
// ErrBusy, ErrNotAttached, ErrInvalid or ErrNoAck.
func (c *Client) Send(ctx context.Context, to peer.ID, payload []byte) (SendResult, error) {
	if len(payload) > protocol.MaxPayload {
		return SendResult{}, ErrTooLarge
	}
	if to == c.h.ID() {
		return SendResult{}, fmt.Errorf("%w: cannot send to self", ErrInvalid)
	}
	id := protocol.NewMessageID()
	sealed, err := protocol.SealDirect(c.key, to, id, c.now(), payload)
	if err != nil {
		return SendResult{ID: id}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	f := &pb.SessionFrame{Kind: &pb.SessionFrame_Send{Send: &pb.DirectMessage{Id: id, To: []byte(to), Sealed: sealed}}}
	res, err := c.msg.request(ctx, id, to, sendAttempts, f)
	if err != nil {
		return SendResult{ID: id}, err
	}
	if res.GetStatus() == pb.Result_STATUS_STORED {
		return SendResult{ID: id, Stored: true, Detail: res.GetDetail()}, nil
	}
	return SendResult{ID: id}, nil
}

// checkGroup validates a group name as every supernode will.
func checkGroup(group string) error {
	if err := protocol.CheckGroupName(group); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Join joins a group; the membership is kept across failovers (re-joined
// on every new session). While the client is not attached it takes effect
// on the next session.
func (c *Client) Join(group string) error { return c.groupOp(group, true) }

// Leave leaves a group.
func (c *Client) Leave(group string) error { return c.groupOp(group, false) }

func (c *Client) groupOp(group string, join bool) error {
	if err := checkGroup(group); err != nil {
		return err
	}
	c.msg.mu.Lock()
	if join {
		c.msg.groups.Join(group)
	} else {
		c.msg.groups.Leave(group)
	}
	c.msg.mu.Unlock()
	if c.groupsChanged != nil {
		c.groupsChanged()
	}
	sess := c.current()
	if sess == nil {
		return nil // applied on the next session
	}
	op, err := c.msg.groupOp(sess.peer, group, join)
	if err != nil {
		return fmt.Errorf("sign membership: %w", err)
	}
	if err := sess.write(c.now(), op); err != nil {
		return err
	}
	if join {
		c.msg.mu.Lock()
		c.msg.groups.Sent(group)
		c.msg.mu.Unlock()
	}
	return nil
}

// Groups lists the groups this client has joined, in no particular order.
func (c *Client) Groups() []string {
	c.msg.mu.Lock()
	defer c.msg.mu.Unlock()
	var out []string
	for _, st := range c.msg.groups.List() {
		out = append(out, st.Group)
	}
	return out
}

// publishAttempts bounds the tries of one publish: enough to ride out a
// group home's crash (the ring moves the group to the next supernode of
// its home cluster, which gathers the replicas before it numbers).
const publishAttempts = 8

// Publish sends payload to every member of group and returns the epoch and
// sequence number the group's home gave it, once a majority of the group's
// home cluster holds it. It retries with the same message ID: the home
// numbers an ID once.
func (c *Client) Publish(ctx context.Context, group string, payload []byte) (PublishResult, error) {
	return c.PublishID(ctx, group, protocol.NewMessageID(), payload)
}

// PublishID is Publish with a message ID the caller chose (16 bytes,
// protocol.NewMessageID): calling it again with the same ID after an error
// is safe, the group's home numbers the message once and members deliver
// it once.
func (c *Client) PublishID(ctx context.Context, group string, id, payload []byte) (PublishResult, error) {
	if len(payload) > protocol.MaxPayload {
		return PublishResult{}, ErrTooLarge
	}
	if err := checkGroup(group); err != nil {
		return PublishResult{}, err
	}
	if len(id) != protocol.MessageIDLen {
		return PublishResult{}, fmt.Errorf("%w: message id of %d bytes, want %d", ErrInvalid, len(id), protocol.MessageIDLen)
	}
	signed, err := protocol.SignPublish(c.key, group, id, payload)
	if err != nil {
		return PublishResult{ID: id}, fmt.Errorf("sign publish: %w", err)
	}
	f := &pb.SessionFrame{Kind: &pb.SessionFrame_Publish{Publish: &pb.GroupPublish{Group: group, Id: id, Signed: signed}}}
	res, err := c.msg.request(ctx, id, "", publishAttempts, f)
	if err != nil {
		return PublishResult{ID: id}, err
	}
	return PublishResult{ID: id, Epoch: res.GetEpoch(), Seq: res.GetSeq()}, nil
}

// Members asks the group's home for the group's members.
func (c *Client) Members(ctx context.Context, group string) ([]peer.ID, error) {
	if err := checkGroup(group); err != nil {
		return nil, err
	}
	id := protocol.NewMessageID()
	ch := make(chan *pb.Members, 1)
	c.msg.mu.Lock()
	c.msg.members[string(id)] = ch
	c.msg.mu.Unlock()
	defer func() {
		c.msg.mu.Lock()
		delete(c.msg.members, string(id))
		c.msg.mu.Unlock()
	}()
	if err := c.msg.write(&pb.SessionFrame{Kind: &pb.SessionFrame_MembersRequest{MembersRequest: &pb.MembersRequest{Id: id, Group: group}}}); err != nil {
		return nil, err
	}
	t := time.NewTimer(2 * c.cfg.AckTimeout)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, fmt.Errorf("members of %s: %w from the group home", group, ErrNoAck)
	case m := <-ch:
		if m.GetError() != "" {
			return nil, fmt.Errorf("members of %s: %s", group, m.GetError())
		}
		out := make([]peer.ID, 0, len(m.GetMembers()))
		for _, b := range m.GetMembers() {
			if id, err := peer.IDFromBytes(b); err == nil {
				out = append(out, id)
			}
		}
		return out, nil
	}
}

// mayBeHome accepts, as the stamper of a group message, the group's home
// by this client's ring or any live regular supernode of its directory.
//
// A client with a partial view (WithPartialView) accepts any stamper: its
// directory holds the supernodes around its keys, not the one a home just
// moved to (a restarted supernode, before the next refresh), and refusing
// that home's messages lost them (TestScenarios/recovery under -race).
// This gives its supernode nothing it lacks: group messages reach a client
// only through its own supernode, which checked the stamp against its
// whole ring, and which, being in the directory, may stamp as itself
// under either rule. What protects a client is the publisher's signature
// over the payload, checked in both cases.
func (c *Client) mayBeHome(group string) func(peer.ID) bool {
	return func(p peer.ID) bool {
		if h, ok := cluster.GroupHome(c.rings.Load(), group); ok && h == p {
			return true
		}
		if c.partialView {
			return true
		}
		e, ok := c.dir.Snapshot().Get(p)
		return ok && e.Role == protocol.RoleSupernode
	}
}

// GroupState is a joined group and the position of the last message of it
// this client delivered (zero before the first): what a restarted daemon
// needs to rejoin and resume it.
type GroupState struct {
	Group string `json:"group"`
	Epoch uint64 `json:"epoch,omitempty"`
	Seq   uint64 `json:"seq,omitempty"`
}

// GroupStates returns the joined groups with their positions, sorted by
// name.
func (c *Client) GroupStates() []GroupState {
	c.msg.mu.Lock()
	defer c.msg.mu.Unlock()
	sts := c.msg.groups.List()
	out := make([]GroupState, 0, len(sts))
	for _, st := range sts {
		out = append(out, GroupState{Group: st.Group, Epoch: st.Pos.Epoch, Seq: st.Pos.Seq})
	}
	return out
}

// RestoreGroups joins the groups of a previous run, each resumed from its
// position on the next session: call it before Run. A state with an
// invalid group name is an error naming it, and nothing is restored.
func (c *Client) RestoreGroups(states []GroupState) error {
	for _, s := range states {
		if err := checkGroup(s.Group); err != nil {
			return fmt.Errorf("restore group %q: %w", s.Group, err)
		}
	}
	c.msg.mu.Lock()
	defer c.msg.mu.Unlock()
	for _, s := range states {
		c.msg.groups.Restore(s.Group, member.Pos{Epoch: s.Epoch, Seq: s.Seq})
	}
	return nil
}
