package groupsim

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode"
	"github.com/overlayd/overlayd/supernode/group"
)

// syncWidth is how many supernodes at a group's place a new home asks
// (supernode's syncWidth).
const syncWidth = 2*cluster.Size - 1

// snode is one supernode: its core and the ports the core drives.
type snode struct {
	s    *sim
	i    int
	id   string // binary peer ID
	pid  peer.ID
	name string
	key  crypto.PrivKey
	up   bool
	// inc counts the node's lives: an event scheduled in one life is
	// dropped in the next.
	inc   int
	core  *group.Core
	stats *group.Stats
	// view is the set of supernodes this node believes alive; ring is
	// the ring of view.
	view      uint64
	ring      *ring.Ring
	log       *memLog
	slots     *slots
	settledAt time.Duration
	sessions  map[string]*client         // attached clients
	local     map[string]map[string]bool // group → local fanout
	links     []*link                    // to each other supernode
	tickDue   bool
	// flapped are the live supernodes a flap took out of view.
	flapped uint64
}

var (
	_ group.Ring  = (*snode)(nil)
	_ group.Net   = (*snode)(nil)
	_ group.Local = (*snode)(nil)
)

func (s *sim) newNode(i int) *snode {
	key := s.newKey()
	pid, err := peer.IDFromPublicKey(key.GetPublic())
	if err != nil {
		panic(err)
	}
	n := &snode{s: s, i: i, id: string(pid), pid: pid, name: fmt.Sprintf("n%d", i), key: key, up: true}
	n.log = newMemLog(s, n)
	s.byID[n.id] = n
	s.str[pid.String()] = n.id
	return n
}

// start begins a life: a fresh core over the log that survived.
func (n *snode) start() {
	n.inc++
	n.up = true
	n.stats = &group.Stats{}
	n.slots = &slots{cap: 64}
	n.sessions = map[string]*client{}
	n.local = map[string]map[string]bool{}
	n.links = make([]*link, len(n.s.nodes))
	for j := range n.links {
		n.links[j] = &link{lat: n.s.dur(500*time.Microsecond, 4*time.Millisecond)}
	}
	n.tickDue = false
	n.ring = n.s.ringOf(n.view)
	c, err := group.New(group.Config{
		Self: n.id, Refresh: n.s.p.Refresh, Ring: n, Replay: n.log, Net: n, Local: n,
		Verifier: n.s.verifier, Signer: supernode.GroupSigner{Key: n.key}, Fanout: n.slots,
		Settled: func() bool { return n.s.now >= n.settledAt }, Stats: n.stats,
		Mutations: n.s.p.Mutations,
	})
	if err != nil {
		panic(err)
	}
	n.core = c
	inc := n.inc
	phase := n.s.dur(0, n.s.p.Refresh)
	var refresh func()
	refresh = func() {
		if !n.alive(inc) {
			return
		}
		n.s.tracef(n.name, "refresh")
		n.core.Refresh(n.s.nowT())
		n.s.chk.forgedApplied(n)
		n.afterEvent()
		n.s.after(n.s.p.Refresh, refresh)
	}
	n.s.after(phase, refresh)
}

func (n *snode) alive(inc int) bool { return n.up && n.inc == inc }

// event runs fn as an event of this node's current life, then ticks.
func (n *snode) event(inc int, fn func()) {
	if !n.alive(inc) {
		return
	}
	fn()
	n.afterEvent()
}

// afterEvent schedules the core's tick while it has timed work.
func (n *snode) afterEvent() {
	if !n.up || n.tickDue || !n.core.Busy() {
		return
	}
	n.tickDue = true
	inc := n.inc
	n.s.after(group.ReplayTick, func() {
		if !n.alive(inc) {
			return
		}
		n.tickDue = false
		n.core.Tick(n.s.nowT())
		n.afterEvent()
	})
}

// crash ends this life: memory and links go, the flushed log stays.
func (n *snode) crash() {
	if !n.up {
		return
	}
	n.s.tracef(n.name, "CRASH")
	n.up = false
	n.inc++
	n.core = nil
	n.log.crash(n.s.now)
	for _, o := range n.s.nodes {
		if o.links != nil && o.links[n.i] != nil {
			o.links[n.i].reset()
		}
	}
	// Every client that believes itself attached here loses its session,
	// those whose attach is still on its way too (their stream is reset
	// like the rest; modelled from n.sessions only, a client that attached
	// 2 ms before the crash waited forever on a session the restarted
	// node never had: seed 583). The sessions first, in the order they
	// always went, so that runs without such a client keep their course.
	for _, c := range sortedClients(n.sessions) {
		c.sessionLost(n)
	}
	for _, c := range n.s.cls {
		c.sessionLost(n) // no-op for the clients above
	}
	n.sessions = nil
	n.local = nil
	// The others' directories notice it gone, each in its time.
	for _, o := range n.s.nodes {
		if o != n && o.up {
			o.learnLater(n, n.s.convergeDelay())
		}
	}
}

// restart begins a new life with the log that survived. Its ring holds
// only itself until its directory fills; it is settled two announce
// intervals after it started. It hears every live supernode within one
// interval, as node/dirdriver's settle rule assumes (each announces
// once an interval): the others learn of it at their own pace (slow-ring
// included). Modelled with slow-ring's 3 s for its own view, it settled
// before it knew a live supernode, took a group over without the log
// that supernode held, and numbered past what it missed (seed 303 of
// 1..1000); a directory that misses a live supernode for two intervals
// (announcements lost) is a gap this model leaves out.
func (n *snode) restart() {
	if n.up {
		return
	}
	n.s.tracef(n.name, "RESTART")
	n.view = 1 << n.i
	n.flapped = 0
	n.settledAt = n.s.now + 2*n.s.p.Refresh
	n.start()
	for _, o := range n.s.nodes {
		if o == n {
			continue
		}
		if o.up {
			o.learnLater(n, n.s.convergeDelay())
		}
		n.learnLater(o, n.s.dur(20*time.Millisecond, n.s.p.Refresh))
	}
}

func (s *sim) convergeDelay() time.Duration {
	if s.on[FaultSlowRing] {
		return s.dur(50*time.Millisecond, 3*time.Second)
	}
	return s.dur(20*time.Millisecond, 700*time.Millisecond)
}

// learnLater has n's view learn o's state (up or down) after d.
func (n *snode) learnLater(o *snode, d time.Duration) {
	inc := n.inc
	n.s.after(d, func() { n.event(inc, func() { n.setView(o, o.up) }) })
}

// setView sets whether n believes o alive, and tells the core when its
// ring changes.
func (n *snode) setView(o *snode, alive bool) {
	v := n.view
	if alive {
		v |= 1 << o.i
	} else if o != n {
		v &^= 1 << o.i
	}
	if v == n.view {
		return
	}
	before := map[string]string{}
	for _, g := range n.s.groups {
		before[g], _ = n.Home(g)
	}
	n.view = v
	n.ring = n.s.ringOf(v)
	n.s.diag.ringChanged(n.s, n, before)
	n.s.tracef(n.name, "ring %s (%d up) view of %s=%v", n.viewString(), bits.OnesCount64(v), o.name, alive)
	n.core.RingChanged(n.s.nowT(), n.ringView())
}

func (n *snode) viewString() string {
	b := make([]byte, len(n.s.nodes))
	for i := range b {
		if n.view&(1<<i) != 0 {
			b[i] = byte('0' + i)
		} else {
			b[i] = '.'
		}
	}
	return string(b)
}

// The core's Ring: n's live ring.

func (n *snode) Home(g string) (string, bool) { return n.ringView().Home(g) }
func (n *snode) Cluster(g string) []string    { return n.ringView().Cluster(g) }
func (n *snode) SyncPeers(g string) []string  { return n.ringView().SyncPeers(g) }
func (n *snode) Has(p string) bool            { return n.ringView().Has(p) }
func (n *snode) ringView() ringView           { return ringView{s: n.s, r: n.ring} }

// ringView is one ring as the core sees it: the live ring's view now, or
// the ring RingChanged is told of, which does not change.
type ringView struct {
	s *sim
	r *ring.Ring
}

func (v ringView) Home(g string) (string, bool) {
	if v.r == nil {
		return "", false
	}
	return v.s.str[v.r.Lookup([]byte(g))], true
}

func (v ringView) lookupN(g string, k int) []string {
	if v.r == nil {
		return nil
	}
	ids := v.r.LookupN([]byte(g), k, nil)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = v.s.str[id]
	}
	return out
}

func (v ringView) Has(p string) bool {
	if v.r == nil {
		return false
	}
	for _, m := range v.r.Members() {
		if v.s.str[m.ID] == p {
			return true
		}
	}
	return false
}

func (v ringView) Cluster(g string) []string   { return v.lookupN(g, cluster.Size) }
func (v ringView) SyncPeers(g string) []string { return v.lookupN(g, syncWidth) }

// The core's Net.

func (n *snode) Send(to string, f *pb.RelayFrame) bool      { return n.send(to, f) }
func (n *snode) SendGroup(to string, f *pb.RelayFrame) bool { return n.send(to, f) }

// The core's Local.

func (n *snode) Attached(c string) bool { return n.sessions[c] != nil }

func (n *snode) Join(g, c string) {
	if n.local[g] == nil {
		n.local[g] = map[string]bool{}
	}
	n.local[g][c] = true
}

func (n *snode) Leave(g, c string) { delete(n.local[g], c) }

func (n *snode) Fanout(gm *pb.GroupMessage) {
	for _, c := range sortedKeys(n.local[gm.GetGroup()]) {
		if cl := n.sessions[c]; cl != nil {
			n.toClient(cl, &pb.SessionFrame{Kind: &pb.SessionFrame_GroupMessage{GroupMessage: gm}})
		}
	}
}

func (n *snode) Deliver(m string, gm *pb.GroupMessage) {
	if cl := n.sessions[m]; cl != nil {
		n.toClient(cl, &pb.SessionFrame{Kind: &pb.SessionFrame_GroupMessage{GroupMessage: gm}})
	}
}

func (n *snode) ToClient(c string, f *pb.SessionFrame) {
	if cl := n.sessions[c]; cl != nil {
		n.toClient(cl, f)
	}
}

// slots is the fanout semaphore.
type slots struct{ used, cap int }

func (sl *slots) TryAcquire() bool {
	if sl.used >= sl.cap {
		return false
	}
	sl.used++
	return true
}

func (sl *slots) Release() error { sl.used--; return nil }
