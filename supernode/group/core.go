package group

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/overlayd/overlayd/protocol/pb"
)

// Pos is a position in a group's message order: (epoch, seq).
type Pos struct{ Epoch, Seq uint64 }

// After reports whether p comes after q.
func (p Pos) After(q Pos) bool { return p.Epoch > q.Epoch || p.Epoch == q.Epoch && p.Seq > q.Seq }

// Entry is one numbered group message in a replay log; Data is opaque to
// the log (EncodeEntry's form).
type Entry struct {
	Epoch, Seq uint64
	Data       []byte
}

// Log is the supernode's replay log (package supernode adapts its store;
// the simulator keeps one in memory with the store's write-behind). Reads
// and appends are synchronous, as raft's Storage is to its core: what an
// append returns is what the log holds in memory; what survives a crash is
// the log's business (the store writes behind, within 20 ms).
type Log interface {
	// AppendReplay appends e to group's log. An entry at or below the
	// log's last position is ignored (nil error); an error means the
	// entry is not held.
	AppendReplay(group string, e Entry) error
	// ReplayAfter returns up to limit entries strictly after pos, in
	// order; first is the oldest position held; ok is false for an
	// empty log.
	ReplayAfter(group string, after Pos, limit int) (entries []Entry, first Pos, ok bool)
	// ReplayLast is the newest position held for group.
	ReplayLast(group string) (Pos, bool)
}

// Ring is this supernode's view of the cluster ring: the rules of
// overlay/cluster over the ring it has now. Peer IDs are in their binary
// form, string(peer.ID).
type Ring interface {
	// Home is the group's home (the ring owner of its name); false
	// while there is no ring.
	Home(group string) (string, bool)
	// Cluster is the group's home cluster, the home first (R members,
	// fewer on a smaller ring).
	Cluster(group string) []string
	// SyncPeers are the first SyncWidth supernodes at the group's place
	// on the ring: whom a new home asks for replicas (itself included;
	// the core leaves itself out).
	SyncPeers(group string) []string
	// Has reports whether supernode p is on the ring.
	Has(p string) bool
}

// Net carries frames to other supernodes: one ordered link per peer.
// A send that returns false was not queued (the link is full, or gone).
type Net interface {
	Send(to string, f *pb.RelayFrame) bool
	// SendGroup queues a GroupMessage frame. The core passes the same
	// frame for every supernode of one publish, so the carrier can
	// encode it once.
	SendGroup(to string, f *pb.RelayFrame) bool
}

// Local is this supernode's side towards its attached clients.
type Local interface {
	// Attached reports whether client has a session here.
	Attached(client string) bool
	// Join and Leave add client to, and remove it from, the group's
	// local fanout.
	Join(group, client string)
	Leave(group, client string)
	// Fanout hands gm to the group's local members (those joined).
	Fanout(gm *pb.GroupMessage)
	// Deliver hands gm to one member (a member's replay).
	Deliver(member string, gm *pb.GroupMessage)
	// ToClient queues a frame for an attached client (results, Resumed).
	ToClient(client string, f *pb.SessionFrame)
}

// Claim is what a verified membership claim says.
type Claim struct {
	Supernode string
	Join      bool
	Seq       uint64
}

// Verifier checks the signatures the core acts on. Every record comes
// signed by whoever originated it: a publish by its publisher, a
// membership by its member, a numbered message by its home.
type Verifier interface {
	VerifyPublish(signed []byte, from, group string, id []byte) error
	VerifyMembership(claim []byte, member, group string) (Claim, error)
	// VerifyStamp checks gm's home stamp by home.
	VerifyStamp(gm *pb.GroupMessage, home string) error
	// OpenGroupMessage checks gm's stamp by a home isHome accepts and
	// its publisher's signature.
	OpenGroupMessage(gm *pb.GroupMessage, isHome func(string) bool) error
}

// Signer stamps the messages this supernode numbers.
type Signer interface {
	Stamp(group string, epoch, seq uint64, publish []byte) ([]byte, error)
}

// Slots is a fail-fast semaphore (capacity.Semaphore).
type Slots interface {
	TryAcquire() bool
	// Release returns a slot; an error is a release without an
	// acquire (a bug of the caller), which the core never makes.
	Release() error
}

// Config wires a Core. Ring, Net, Local, Verifier, Signer and Fanout are
// required.
type Config struct {
	// Self is this supernode's peer ID, binary form.
	Self string
	// Refresh is the membership refresh interval; records last 3.
	Refresh time.Duration
	Ring    Ring
	// Replay is the replay log; nil: no resume or replication.
	Replay   Log
	Net      Net
	Local    Local
	Verifier Verifier
	Signer   Signer
	// Fanout is the fanout semaphore: a publish and a replay tick take
	// a slot.
	Fanout Slots
	// Settled reports whether this supernode's directory has settled
	// (supernode.RouterConfig.Settled); nil: from the start.
	Settled func() bool
	// CheckGroup validates a group name; nil accepts any non-empty one.
	CheckGroup func(string) error
	// MaxMemberships and MaxMembershipsPerOrigin bound the memberships
	// kept for other supernodes; MaxHomeGroups the groups this one is
	// home to. Zero: 65,536, half of it, and 65,536.
	MaxMemberships, MaxMembershipsPerOrigin, MaxHomeGroups int
	// MaxBatchBytes bounds a membership batch's records in bytes (a
	// relay frame less a few bytes); zero: 1 MiB.
	MaxBatchBytes int
	// PerMemberFanout: one frame per member instead of one per
	// supernode (the naive design, for benchmarks only).
	PerMemberFanout bool
	// Stats receives the counts; nil: the core keeps its own.
	Stats *Stats
	Log   *slog.Logger
	// Mutations disables fixes one at a time, for the simulator's
	// mutation check (MutationsForTest); zero in production.
	Mutations Mutations
}

// Mutations switch off, one at a time, the fixes of past losses of
// acknowledged messages, so that the simulator can show it finds each.
type Mutations struct {
	// NoSettledWait: a starting supernode takes the home role at once.
	NoSettledWait bool
	// NoToldHomes: a member's supernode takes group frames from its
	// ring's home only.
	NoToldHomes bool
	// NoRingChangedDrop: a home keeps its record when the ring moves
	// the group away.
	NoRingChangedDrop bool
	// NoAwayDrop: a record made while another supernode was the home is
	// kept when the ring makes this one the home.
	NoAwayDrop bool
	// NoReplayDoneFromAsked: a held member's ReplayDone is taken from
	// the ring's home only.
	NoReplayDoneFromAsked bool
	// NoPosHandoff: a supernode's position moves with every frame of
	// the ring's home, before a new home has replayed to it, and a home
	// replays a supernode only when its first record of it is the
	// supernode's own resume (the rule before testnet/groupsim).
	NoPosHandoff bool
	// NoHeldCheck: a replica acknowledges an entry its log ignored.
	NoHeldCheck bool
	// NoReplicaHomeCheck: a replica holds a live replica from any member
	// of the group's home cluster, not only from the home by its ring.
	NoReplicaHomeCheck bool
	// NoSyncMerge: a new home appends its sync's answers as they come.
	NoSyncMerge bool
	// NoReleaseAfterMajority: a home logs and fans out a message as
	// soon as it numbers it, before any replica holds it.
	NoReleaseAfterMajority bool
	// NoMemberResumePos: a supernode with no position in a group gets
	// none from a member's resume.
	NoMemberResumePos bool
	// NoSyncEndorse: a supernode answers any cluster member's sync unless
	// it is the home by its own ring, and a new home numbers when its
	// sync's wait ends with no answer.
	NoSyncEndorse bool
	// NoResumeWithJoin: a supernode sends its own resume with a member's
	// join only to a home its position does not follow.
	NoResumeWithJoin bool
	// NoRenumberLogged: a home answers a retry of a publish its replay
	// log holds OK at the logged position.
	NoRenumberLogged bool
	// NoResumedReset: a home replays to a supernode once per record,
	// even after the supernode's memberships there all ended.
	NoResumedReset bool
	// NoRecordReplay: a supernode's refresh with no position replays it
	// nothing at a record new to it.
	NoRecordReplay bool
	// NoSyncAppendRetry: a new home ends its sync though its log did not
	// take every answer.
	NoSyncAppendRetry bool
	// NoFollowedHome: a member's supernode takes group frames from its
	// ring's home and the homes it told only, not from the home its
	// position follows.
	NoFollowedHome bool
	// NoHoldBack: a member's supernode fans out a live frame from a home
	// that has not replayed to it, or one that skips past a message it
	// did not get; a home replays to a supernode's resume once while it
	// has members there.
	NoHoldBack bool
	// NoResumeCatchUp: a held member is let in at the ReplayDone of any
	// home it asked, though this supernode's position, following another
	// home, is past the replay's end.
	NoResumeCatchUp bool
	// NoKeepGathered: a supernode that stops being a group's home while
	// its sync gathers drops what the sync gathered.
	NoKeepGathered bool
	// NoReplayFromSync: a supernode with no position that refreshes a
	// record new to it is replayed the record's own epoch only, not what
	// its sync took in.
	NoReplayFromSync bool
	// NoJoinStart: a member's fresh join is not told the supernode's
	// position (Resumed), so a member with no message yet has no position
	// to resume from.
	NoJoinStart bool
	// NoReplicaFill: a replica appends a live replica past a hole in its
	// log (it refused the ones before while its ring lagged), as before.
	NoReplicaFill bool
	// NoSentResume: a member whose join reached a session but was never
	// told where it starts joins afresh on the next session. The fix is
	// the member's (overlay/member's Sent); the core never reads this:
	// the simulator's clients do.
	NoSentResume bool
	// NoSyncAnswersOnly: a syncing supernode gathers a live replica from
	// a peer it waits for as if it were that peer's answer.
	NoSyncAnswersOnly bool
	// NoFollowedPastReplay: a supernode's own replay from a home makes
	// its position follow that home even when the position is past the
	// replay's end (another home's frames brought it there).
	NoFollowedPastReplay bool
	// NoToldHoldBack: a frame of a home told (not the ring's, not the
	// one the position follows) is fanned out even when it skips past
	// the supernode's position.
	NoToldHoldBack bool
	// NoFillResolved: a fill's answer ends at the home's log's last
	// position, not where its numbering is resolved.
	NoFillResolved bool
	// NoHeldResend: a held member's resume is sent again only when the
	// ring names another home, not when the home it went to has not
	// answered within a refresh (the frame was lost).
	NoHeldResend bool
	// NoPastRings: a new home's sync asks the sync peers of its live
	// ring only, and is endorsed by a majority of the live ring's home
	// cluster alone (rings.go).
	NoPastRings bool
	// NoRetakeOnTimeout: a home whose replicas did not ack a message in
	// time keeps its record and numbers on.
	NoRetakeOnTimeout bool
	// NoFillAfterSync: a replica asks the home to fill a hole in its log
	// while its own sync of the group is under way.
	NoFillAfterSync bool
}

// Stats are the core's cumulative counts (atomic: metrics read them
// without the core's lock).
type Stats struct {
	GroupPublishes, GroupFramesSent, GroupFanouts, FanoutRefused atomic.Uint64
	// MembershipRefused counts memberships refused for a missing or
	// invalid claim; PublishRefused publishes a home refused unsigned;
	// GroupRefused group messages not stamped by a home of the group.
	MembershipRefused, PublishRefused, GroupRefused atomic.Uint64
	// GroupHeldBack counts live group frames a member's supernode held
	// back until the home replayed to it (member.go, holdsBack).
	GroupHeldBack atomic.Uint64

	// Memberships past the bound or a supernode's share of it, new home
	// groups past theirs.
	MembershipsFull, MembershipsOriginFull, HomeGroupsFull atomic.Uint64
	// Group resume: replays started, done, done with a gap, refused,
	// frames replayed, held members released without the home's answer,
	// held members' resumes sent again, appends the log refused and
	// entries that did not decode.
	ReplaysStarted, ReplaysDone, ReplaysGap, ReplaysRefused, Replayed, ResumesTimedOut, ResumesResent, ReplayLogFailed atomic.Uint64
	// Home replication: replica frames sent, replicas held, refused,
	// publishes not replicated in time, retries answered without
	// renumbering, syncs started, publishes answered BUSY while unsettled,
	// fills asked of a home (a hole in this supernode's log).
	ReplicasSent, ReplicasHeld, ReplicasRefused, ReplicationTimeouts, PublishRetries, Syncs, HomeUnsettled, ReplicaFills atomic.Uint64
}

// Core is one supernode's group messaging, as a state machine: each
// method is an event (a frame from a peer or client, a ring change, a
// tick with the time), and what it decides goes out through the ports of
// its Config. It is not safe for concurrent use: its owner serialises
// calls. It starts no goroutine, reads no clock and draws no randomness.
type Core struct {
	cfg   Config
	self  string
	log   *slog.Logger
	stats *Stats

	epoch uint64 // the newest epoch given to a home group
	homes map[string]*homeGroup
	// membersBy counts home-group memberships by the supernode that sent
	// them, within the bounds.
	membersBy *originCounts

	// The member's-supernode side.
	joined   map[string]map[string][]byte // client → groups joined here → its claim
	local    map[string]map[string]bool   // group → clients in its local fanout
	resuming map[string]map[string]*heldResume
	pos      map[string]Pos
	posFrom  map[string]string // group → the home its position follows
	// holding: per group, the home whose live frames this supernode holds
	// back until that home's replay to it is done (member.go, holdsBack).
	holding map[string]string
	// toldHomes: per group with members here, the supernodes this one
	// sent their memberships to and until when those records last there.
	toldHomes map[string]map[string]time.Time

	replays     map[replayKey]*replayJob
	replayTurn  uint64
	pendingPubs map[pubKey]*pendingPublish
	syncs       map[string]*groupSync
	// fills are the holes in this supernode's log it asked a group's
	// home to fill (replica.go, askFill), by group.
	fills map[string]*groupFill
	// resolved is, by group, where the last fill's home said its
	// numbering was resolved: a live replica right after it is no hole
	// (the positions between were dropped). Set only by a fill, so
	// bounded as fills are (by MaxHomeGroups at a time); dropped once
	// the log passes it.
	resolved  map[string]Pos
	restamped map[restampKey][]byte
	// ring is the ring RingChanged was told last; past are the rings
	// before it within RecentRings refreshes, oldest first (rings.go).
	ring Ring
	past []pastRing
	// replayBudget is ReplayFramesPerTick; raised by benchmarks.
	replayBudget int
}

// New returns a Core; it does nothing until called.
func New(cfg Config) (*Core, error) {
	if cfg.Self == "" || cfg.Ring == nil || cfg.Net == nil || cfg.Local == nil || cfg.Verifier == nil || cfg.Signer == nil || cfg.Fanout == nil {
		return nil, errors.New("group: missing self, ring, net, local, verifier, signer or fanout slots")
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = 10 * time.Second
	}
	if cfg.MaxMemberships <= 0 {
		cfg.MaxMemberships = 65536
	}
	if cfg.MaxMembershipsPerOrigin <= 0 {
		cfg.MaxMembershipsPerOrigin = max(1, cfg.MaxMemberships/2)
	}
	if cfg.MaxHomeGroups <= 0 {
		cfg.MaxHomeGroups = cfg.MaxMemberships
	}
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = 1 << 20
	}
	if cfg.Stats == nil {
		cfg.Stats = &Stats{}
	}
	lg := cfg.Log
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	return &Core{
		cfg: cfg, self: cfg.Self, log: lg, stats: cfg.Stats,
		homes:        map[string]*homeGroup{},
		membersBy:    newOriginCounts(),
		joined:       map[string]map[string][]byte{},
		local:        map[string]map[string]bool{},
		resuming:     map[string]map[string]*heldResume{},
		pos:          map[string]Pos{},
		posFrom:      map[string]string{},
		holding:      map[string]string{},
		toldHomes:    map[string]map[string]time.Time{},
		replays:      map[replayKey]*replayJob{},
		pendingPubs:  map[pubKey]*pendingPublish{},
		syncs:        map[string]*groupSync{},
		fills:        map[string]*groupFill{},
		resolved:     map[string]Pos{},
		restamped:    map[restampKey][]byte{},
		replayBudget: ReplayFramesPerTick,
	}, nil
}

// Stats returns the core's counts.
func (c *Core) Stats() *Stats { return c.stats }

// Busy reports whether the core has timed work waiting (replays, publishes
// waiting for replicas, syncs): its driver ticks it every ReplayTick while
// it has.
func (c *Core) Busy() bool {
	return len(c.replays) > 0 || len(c.pendingPubs) > 0 || len(c.syncs) > 0
}

func (c *Core) settled() bool {
	return c.cfg.Mutations.NoSettledWait || c.cfg.Settled == nil || c.cfg.Settled()
}

func (c *Core) validGroup(g string) bool {
	if c.cfg.CheckGroup == nil {
		return g != ""
	}
	return c.cfg.CheckGroup(g) == nil
}

func (c *Core) groupHome(g string) (string, bool) { return c.cfg.Ring.Home(g) }

func (c *Core) isGroupHome(g string) bool {
	h, ok := c.cfg.Ring.Home(g)
	return ok && h == c.self
}

// originCounts counts records by the supernode that sent them.
type originCounts struct {
	total int
	by    map[string]int
}

func newOriginCounts() *originCounts { return &originCounts{by: map[string]int{}} }

func (o *originCounts) add(sn string) {
	if o == nil {
		return
	}
	o.total++
	o.by[sn]++
}

func (o *originCounts) remove(sn string) {
	if o == nil {
		return
	}
	o.total--
	if o.by[sn]--; o.by[sn] <= 0 {
		delete(o.by, sn)
	}
}

// MembershipsHeld returns the memberships held for other supernodes and
// the number of groups this supernode keeps a home record of.
func (c *Core) MembershipsHeld() (memberships, homes int) { return c.membersBy.total, len(c.homes) }
