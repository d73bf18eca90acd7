// Package member is a group member's side of group messaging, as pure
// state: the groups a client joined, the position of the last message it
// delivered in each (where a new session resumes), and the dedup that
// makes a message delivered once when it comes twice (a replay and the
// live copy, the old and the new session while moving home, a retried
// publish numbered again by a new home). The client (node/client) and the
// deterministic simulator (testnet/groupsim) both decide with it.
//
// It is not safe for concurrent use: its owner locks.
package member

import (
	"slices"
	"strconv"

	"github.com/overlayd/overlayd/overlay/dedup"
)

// Pos is a group message's position: epochs order the homes' numbering.
type Pos struct{ Epoch, Seq uint64 }

// After reports whether p comes after q.
func (p Pos) After(q Pos) bool { return p.Epoch > q.Epoch || p.Epoch == q.Epoch && p.Seq > q.Seq }

// Groups is a client's delivery state in the groups it joined.
type Groups struct {
	joined map[string]bool
	cursor map[string]Pos
	start  map[string]Pos  // Start's, until the first delivery
	sent   map[string]bool // Sent's: the join reached a session
	seen   *dedup.Window
}

// New returns an empty state that records delivered messages in seen
// (which the client may share with its direct messages: the keys do not
// collide).
func New(seen *dedup.Window) *Groups {
	return &Groups{joined: map[string]bool{}, cursor: map[string]Pos{}, start: map[string]Pos{}, sent: map[string]bool{}, seen: seen}
}

// Join records that the client is a member of group.
func (g *Groups) Join(group string) { g.joined[group] = true }

// Leave forgets group and its position: a later join starts afresh.
func (g *Groups) Leave(group string) {
	delete(g.joined, group)
	delete(g.cursor, group)
	delete(g.start, group)
	delete(g.sent, group)
}

// Joined reports whether the client is a member of group: a group
// message of any other group is refused (a supernode kept it in a group
// it left, or made one up).
func (g *Groups) Joined(group string) bool { return g.joined[group] }

// Restore joins group at position p (a previous run's state); a zero p
// has no position.
func (g *Groups) Restore(group string, p Pos) {
	g.joined[group] = true
	if p != (Pos{}) {
		g.cursor[group] = p
	}
}

// Start records p, where the member's supernode stood in group when the
// member joined there (a Resumed notice at a fresh join), as where a new
// session resumes while no message has been delivered: a session lost
// before the first message then resumes from p, and what was published
// while the member was away is replayed to it. It is not a position:
// delivery is decided without it, so a supernode that lies about p can
// make a resume ask for too little, never make the member drop a live
// message. A joined group's position, once it has one, wins.
func (g *Groups) Start(group string, p Pos) {
	if !g.joined[group] || p == (Pos{}) {
		return
	}
	g.start[group] = p
}

// Sent records that the join of group was written to a session: from
// then on the membership is owed every message published after it took
// effect, whether or not the member was told where it starts.
func (g *Groups) Sent(group string) {
	if g.joined[group] {
		g.sent[group] = true
	}
}

// Resume is where a new session resumes group from: the last message
// delivered, else where the member started (Start), else, for a join
// that reached a session but was never told where it starts, the zero
// position: the home replays its whole log, so the member may deliver
// messages from before its join but misses none after it. A supernode
// with no position of the group has nothing to tell a fresh join, and a
// member that lost that session before its first message came back
// with a fresh join, told the next supernode's position, and missed what
// was published while it was away (found by testnet/groupsim, seed
// 2020). False when the join never reached a session: it asks for no
// replay.
func (g *Groups) Resume(group string) (Pos, bool) {
	if p, ok := g.cursor[group]; ok {
		return p, ok
	}
	if p, ok := g.start[group]; ok {
		return p, ok
	}
	return Pos{}, g.sent[group]
}

// State is a joined group and its position.
type State struct {
	Group string
	Pos   Pos
}

// List returns the joined groups with their positions, sorted by name.
func (g *Groups) List() []State {
	out := make([]State, 0, len(g.joined))
	for name := range g.joined {
		out = append(out, State{Group: name, Pos: g.cursor[name]})
	}
	slices.SortFunc(out, func(a, b State) int {
		switch {
		case a.Group < b.Group:
			return -1
		case a.Group > b.Group:
			return 1
		}
		return 0
	})
	return out
}

// Deliver decides a group message whose signatures the caller checked:
// true when it is to be delivered, false when it is a copy of one
// delivered before, by position ((group, epoch, seq): a replay and the
// live copy) or by publish ((publisher, ID): a retry numbered again by a
// new home), or when it comes at or before the group's position. A
// delivered message moves the group's position forward; it never moves
// back, so what the application sees of a group is in order.
//
// A message before the position comes in a replay to the member's
// supernode, for its members that had missed it, while this member,
// which joined there after it was published, was already taking the
// live messages that followed (found by testnet/groupsim).
func (g *Groups) Deliver(group string, p Pos, from, id []byte) bool {
	if at, ok := g.cursor[group]; ok && g.joined[group] && !p.After(at) {
		return false
	}
	byPos := "g/" + group + "/" + strconv.FormatUint(p.Epoch, 10) + "/" + strconv.FormatUint(p.Seq, 10)
	// Both keys are recorded, as the client always did: a copy by either
	// is a copy.
	dupPos := g.seen.Seen(byPos)
	if dupPos || g.seen.Seen("p/"+string(from)+"/"+string(id)) {
		return false
	}
	if g.joined[group] && p.After(g.cursor[group]) {
		g.cursor[group] = p
	}
	return true
}

// Gap turns a Resumed notice into what the application is told: a gap of
// missed messages (unknown: at least missed, the log no longer held the
// member's epoch), or nothing when the replay was complete.
func Gap(missed uint64, unknown bool) (report bool) { return missed > 0 || unknown }
