package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// Messaging defaults of the client side.
const (
	// sendAttempts and ackTimeout: a direct message is sent up to
	// sendAttempts times, waiting ackTimeout for its ack each time.
	sendAttempts = 4
	// dedupWindow is how many recent message keys a client remembers to
	// drop duplicates.
	dedupWindow = 8192
	// listenBuffer is how many inbound messages a slow local listener may
	// fall behind before it misses some (counted in Dropped).
	listenBuffer = 1024
)

// Sentinel errors of Send and Publish; the message names the cause.
var (
	ErrNotAttached = errors.New("not attached to a supernode")
	ErrOffline     = errors.New("recipient is offline: not attached to any supernode")
	ErrUnreachable = errors.New("recipient's supernode cannot be reached")
	ErrBusy        = errors.New("supernode busy")
	ErrInvalid     = errors.New("invalid request")
	ErrTooLarge    = fmt.Errorf("%w: payload larger than %d bytes", ErrInvalid, protocol.MaxPayload)
	ErrNoAck       = errors.New("no acknowledgement from the recipient")
)

// Inbound is one message delivered to this node, as local listeners see it.
type Inbound struct {
	Kind    string    `json:"kind"` // "direct", "group" or "gap"
	From    string    `json:"from,omitempty"`
	Group   string    `json:"group,omitempty"`
	Epoch   uint64    `json:"epoch,omitempty"`
	Seq     uint64    `json:"seq,omitempty"`
	ID      string    `json:"id,omitempty"`
	Payload []byte    `json:"payload,omitempty"`
	Text    string    `json:"text,omitempty"`
	Dropped uint64    `json:"dropped,omitempty"`
	Time    time.Time `json:"time"`
}

// PublishResult is the group home's answer to a publish.
type PublishResult struct {
	ID    string `json:"id"`
	Epoch uint64 `json:"epoch"`
	Seq   uint64 `json:"seq"`
}

type outcome struct {
	acked  bool
	result *pb.Result
}

// messenger is the client side of messaging. It sends over the current
// session, retries until acked, drops duplicates, keeps the joined groups
// (re-joined on every new session) and feeds local listeners.
type messenger struct {
	n          *Node
	ackTimeout time.Duration

	mu      sync.Mutex
	pending map[string]chan outcome
	members map[string]chan *pb.Members
	groups  map[string]bool
	subs    map[*Listener]struct{}
	seen    map[string]struct{}
	order   []string
	next    int
}

func newMessenger(n *Node) *messenger {
	return &messenger{
		n: n, ackTimeout: max(2*n.cfg.Keepalive, 500*time.Millisecond),
		pending: map[string]chan outcome{}, members: map[string]chan *pb.Members{},
		groups: map[string]bool{}, subs: map[*Listener]struct{}{}, seen: map[string]struct{}{},
		order: make([]string, dedupWindow),
	}
}

// Listener receives inbound messages; see Node.Listen.
type Listener struct {
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
// (and gets a "gap" entry when it catches up); it never slows the node.
func (n *Node) Listen() (*Listener, error) {
	if n.msg == nil {
		return nil, errors.New("listen: only ordinary nodes receive messages")
	}
	c := make(chan Inbound, listenBuffer)
	l := &Listener{C: c, c: c, m: n.msg}
	n.msg.mu.Lock()
	n.msg.subs[l] = struct{}{}
	n.msg.mu.Unlock()
	return l, nil
}

func (m *messenger) publishLocal(in Inbound) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for l := range m.subs {
		if l.dropped > 0 {
			select {
			case l.c <- Inbound{Kind: "gap", Dropped: l.dropped, Time: in.Time}:
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
	if _, ok := m.seen[key]; ok {
		return true
	}
	if old := m.order[m.next]; old != "" {
		delete(m.seen, old)
	}
	m.order[m.next] = key
	m.next = (m.next + 1) % len(m.order)
	m.seen[key] = struct{}{}
	return false
}

// write sends a frame on the current session.
func (m *messenger) write(f *pb.SessionFrame) error {
	sess := m.n.attacher.current()
	if sess == nil {
		return ErrNotAttached
	}
	return sess.write(m.n.now(), f)
}

// handle takes the messaging frames of a session.
func (m *messenger) handle(sess *clientSession, f *pb.SessionFrame) {
	now := m.n.now()
	switch k := f.GetKind().(type) {
	case *pb.SessionFrame_Deliver:
		d := k.Deliver
		from, err := peer.IDFromBytes(d.GetFrom())
		if err != nil {
			return
		}
		// Ack first, duplicates too: the sender may have missed our ack.
		_ = sess.write(now, &pb.SessionFrame{Kind: &pb.SessionFrame_Ack{Ack: &pb.Ack{
			Id: d.GetId(), From: []byte(m.n.ID()), To: d.GetFrom(), Origin: d.GetOrigin(),
		}}})
		if m.duplicate("d/" + string(d.GetFrom()) + "/" + string(d.GetId())) {
			return
		}
		m.publishLocal(Inbound{Kind: "direct", From: from.String(), ID: hex.EncodeToString(d.GetId()),
			Payload: d.GetPayload(), Text: printable(d.GetPayload()), Time: now})
	case *pb.SessionFrame_GroupMessage:
		g := k.GroupMessage
		if m.duplicate(fmt.Sprintf("g/%s/%d/%d", g.GetGroup(), g.GetEpoch(), g.GetSeq())) {
			return
		}
		from, _ := peer.IDFromBytes(g.GetFrom())
		m.publishLocal(Inbound{Kind: "group", Group: g.GetGroup(), Epoch: g.GetEpoch(), Seq: g.GetSeq(), From: from.String(),
			ID: hex.EncodeToString(g.GetId()), Payload: g.GetPayload(), Text: printable(g.GetPayload()), Time: now})
	case *pb.SessionFrame_Gap:
		m.publishLocal(Inbound{Kind: "gap", Dropped: k.Gap.GetDropped(), Time: now})
	case *pb.SessionFrame_Ack:
		m.resolve(k.Ack.GetId(), outcome{acked: true})
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
	ch := m.pending[string(id)]
	m.mu.Unlock()
	if ch != nil {
		select {
		case ch <- o:
		default:
		}
	}
}

// sessionStarted re-joins the node's groups on a new session.
func (m *messenger) sessionStarted(sess *clientSession) {
	m.mu.Lock()
	groups := make([]string, 0, len(m.groups))
	for g := range m.groups {
		groups = append(groups, g)
	}
	m.mu.Unlock()
	for _, g := range groups {
		_ = sess.write(m.n.now(), &pb.SessionFrame{Kind: &pb.SessionFrame_GroupOp{GroupOp: &pb.GroupOp{Group: g, Join: true}}})
	}
}

func newMessageID() []byte {
	b := make([]byte, protocol.MessageIDLen)
	_, _ = rand.Read(b)
	return b
}

func statusErr(r *pb.Result) error {
	var base error
	switch r.GetStatus() {
	case pb.Result_STATUS_OK:
		return nil
	case pb.Result_STATUS_OFFLINE:
		base = ErrOffline
	case pb.Result_STATUS_UNREACHABLE:
		base = ErrUnreachable
	case pb.Result_STATUS_BUSY:
		base = ErrBusy
	case pb.Result_STATUS_INVALID:
		base = ErrInvalid
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
func (m *messenger) request(ctx context.Context, id []byte, attempts int, f *pb.SessionFrame) (*pb.Result, error) {
	ch := make(chan outcome, 4)
	m.mu.Lock()
	m.pending[string(id)] = ch
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.pending, string(id))
		m.mu.Unlock()
	}()
	var last error = ErrNoAck
	for i := 0; i < attempts; i++ {
		if err := m.write(f); err != nil {
			last = err
		}
		t := time.NewTimer(m.ackTimeout)
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
			if errors.Is(err, ErrInvalid) {
				return nil, err
			}
			last = err
			// Transient: the recipient may be re-attaching. Wait before
			// the next attempt rather than hammering.
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(m.ackTimeout / 2):
			}
		case <-t.C:
		}
	}
	return nil, last
}

// Send delivers payload to peer to and waits for the recipient's ack. It
// retries on timeout with the same message ID (the recipient drops
// duplicates), and returns ErrOffline, ErrUnreachable, ErrBusy, ErrNotAttached
// or ErrNoAck (wrapped with details) when it could not deliver.
func (n *Node) Send(ctx context.Context, to peer.ID, payload []byte) (string, error) {
	if n.msg == nil {
		return "", errors.New("send: only ordinary nodes send messages (supernodes relay them)")
	}
	if len(payload) > protocol.MaxPayload {
		return "", ErrTooLarge
	}
	if to == n.ID() {
		return "", fmt.Errorf("%w: cannot send to self", ErrInvalid)
	}
	id := newMessageID()
	f := &pb.SessionFrame{Kind: &pb.SessionFrame_Send{Send: &pb.DirectMessage{Id: id, To: []byte(to), Payload: payload}}}
	_, err := n.msg.request(ctx, id, sendAttempts, f)
	return hex.EncodeToString(id), err
}

// JoinGroup joins a group; the membership is kept across failovers.
func (n *Node) JoinGroup(group string) error { return n.groupOp(group, true) }

// LeaveGroup leaves a group.
func (n *Node) LeaveGroup(group string) error { return n.groupOp(group, false) }

func (n *Node) groupOp(group string, join bool) error {
	if n.msg == nil {
		return errors.New("groups: only ordinary nodes join groups")
	}
	if group == "" || len(group) > protocol.MaxGroupName {
		return fmt.Errorf("%w: group name must be 1 to %d bytes", ErrInvalid, protocol.MaxGroupName)
	}
	n.msg.mu.Lock()
	if join {
		n.msg.groups[group] = true
	} else {
		delete(n.msg.groups, group)
	}
	n.msg.mu.Unlock()
	err := n.msg.write(&pb.SessionFrame{Kind: &pb.SessionFrame_GroupOp{GroupOp: &pb.GroupOp{Group: group, Join: join}}})
	if errors.Is(err, ErrNotAttached) {
		return nil // applied on the next session
	}
	return err
}

// Groups lists the groups this node has joined.
func (n *Node) Groups() []string {
	if n.msg == nil {
		return nil
	}
	n.msg.mu.Lock()
	defer n.msg.mu.Unlock()
	out := make([]string, 0, len(n.msg.groups))
	for g := range n.msg.groups {
		out = append(out, g)
	}
	return out
}

// Publish sends payload to every member of group and returns the sequence
// number the group's home gave it.
func (n *Node) Publish(ctx context.Context, group string, payload []byte) (PublishResult, error) {
	if n.msg == nil {
		return PublishResult{}, errors.New("publish: only ordinary nodes publish")
	}
	if len(payload) > protocol.MaxPayload {
		return PublishResult{}, ErrTooLarge
	}
	if group == "" || len(group) > protocol.MaxGroupName {
		return PublishResult{}, fmt.Errorf("%w: group name must be 1 to %d bytes", ErrInvalid, protocol.MaxGroupName)
	}
	id := newMessageID()
	f := &pb.SessionFrame{Kind: &pb.SessionFrame_Publish{Publish: &pb.GroupPublish{Group: group, Id: id, Payload: payload}}}
	// A publish is not retried after a lost answer: that could number it
	// twice. One attempt, then the error.
	res, err := n.msg.request(ctx, id, 1, f)
	if err != nil {
		return PublishResult{}, err
	}
	return PublishResult{ID: hex.EncodeToString(id), Epoch: res.GetEpoch(), Seq: res.GetSeq()}, nil
}

// GroupMembers asks the group's home for its members.
func (n *Node) GroupMembers(ctx context.Context, group string) ([]string, error) {
	if n.msg == nil {
		return nil, errors.New("members: only ordinary nodes ask")
	}
	id := newMessageID()
	ch := make(chan *pb.Members, 1)
	n.msg.mu.Lock()
	n.msg.members[string(id)] = ch
	n.msg.mu.Unlock()
	defer func() {
		n.msg.mu.Lock()
		delete(n.msg.members, string(id))
		n.msg.mu.Unlock()
	}()
	if err := n.msg.write(&pb.SessionFrame{Kind: &pb.SessionFrame_MembersRequest{MembersRequest: &pb.MembersRequest{Id: id, Group: group}}}); err != nil {
		return nil, err
	}
	t := time.NewTimer(2 * n.msg.ackTimeout)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, errors.New("members: no answer from the group home")
	case m := <-ch:
		if m.GetError() != "" {
			return nil, errors.New("members: " + m.GetError())
		}
		out := make([]string, 0, len(m.GetMembers()))
		for _, b := range m.GetMembers() {
			if id, err := peer.IDFromBytes(b); err == nil {
				out = append(out, id.String())
			}
		}
		return out, nil
	}
}

// printable returns b as text when it is valid UTF-8 without control
// characters other than newline and tab, else "".
func printable(b []byte) string {
	s := string(b)
	for _, r := range s {
		if r == 0xfffd || (r < 0x20 && r != '\n' && r != '\t') {
			return ""
		}
	}
	return s
}
