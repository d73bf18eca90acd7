package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/node/role"
	"github.com/overlayd/overlayd/protocol"
)

// The driver of --role auto; the rules are the pure role.Decide (package
// node/role). An auto node builds both sides at Start: the client
// (node/client) and the supernode machinery (semaphores, admission,
// router, fanout engine, announcer), so no field changes after Start. The
// atomic serving flag says which role it plays:
//
//   - ordinary (serving false): admission is closed (an attach is answered
//     REDIRECT with alternatives), nothing is announced, the node does not
//     keep the supernode mesh.
//   - supernode (serving true): admission is open, the announce and mesh
//     loops run, and the circuit relay service runs.
//
// The client side keeps running in both roles: a promoted auto node stays
// attached, as a client, to another supernode, so Send, Publish,
// JoinGroup and Listen work the same in both roles and a role change
// loses no message (a pinned supernode has no client side at all).
//
// One goroutine, roleLoop, evaluates role.Decide and makes every role
// change, so promotions and demotions never overlap.

// roleRun is what status shows of the driver. Guarded by mu.
type roleRun struct {
	mu        sync.Mutex
	last      role.Decision
	evaluated bool
	draining  int    // clients left to drain while demoting
	drainWhy  string // the demotion's reason
	// changedAt and changeWhy are the last role change and the
	// criteria it was made on.
	changedAt time.Time
	changeWhy string
}

// noteChange records a role change made on d.
func (n *Node) noteChange(d role.Decision) {
	why := d.Reason
	for _, c := range d.Criteria {
		if c.Name == role.CritNeeded || c.Name == role.CritSurplus {
			why += "; " + c.Detail
		}
	}
	n.role.mu.Lock()
	n.role.changedAt, n.role.changeWhy = n.now(), why
	n.role.mu.Unlock()
}

// roleLoop evaluates the role rules on every directory change and every
// role.EvalInterval, and carries out promotions and demotions.
func (n *Node) roleLoop(ctx context.Context) {
	changes, cancel := n.dir.Subscribe()
	defer cancel()
	tick := time.NewTicker(role.EvalInterval(n.cfg.AnnounceInterval))
	defer tick.Stop()
	rng := rand.New(rand.NewPCG(n.seed(), n.seed()))
	policy := n.cfg.RolePolicy()
	var st role.State
	var svc *roleService
	defer func() {
		if svc != nil {
			svc.stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case <-tick.C:
		}
		if c, ok := n.MegaCert(); ok {
			// An operator made this node a mega-supernode: the certificate
			// pins the role until it is demoted.
			n.setRoleDecision(role.Decision{Reason: fmt.Sprintf("mega-supernode by operator certificate %d", c.Serial)})
			st = role.State{}
			continue
		}
		var dec role.Decision
		dec, st = role.Decide(policy, n.roleInput(), st, rng)
		n.setRoleDecision(dec)
		switch dec.Action {
		case role.Promote:
			n.log.Info("auto role: promoting to supernode", "why", dec.Reason)
			n.noteChange(dec)
			n.m.roleChanges.WithLabelValues("supernode").Inc()
			svc = n.promoteAuto(ctx)
		case role.Demote:
			n.log.Info("auto role: demoting to ordinary", "why", dec.Reason, "drain", n.cfg.DrainPeriod)
			n.noteChange(dec)
			n.m.roleChanges.WithLabelValues("ordinary").Inc()
			n.demoteAuto(ctx, svc, dec.Reason)
			svc = nil
		}
	}
}

// roleInput gathers role.Decide's input (role.NewInput): the directory,
// with this node's own entry taken from its live state (present with its
// capacity and load while serving, absent otherwise).
func (n *Node) roleInput() role.Input {
	now := n.now()
	return role.NewInput(role.View{
		Now:          now,
		Self:         n.ID(),
		Serving:      n.serving.Load(),
		Reachability: n.Reachability(),
		Uptime:       now.Sub(n.started),
		Capacity:     n.cfg.Capacity,
		Load:         n.load(),
		Snapshot:     n.dir.Snapshot(),
		Ring:         n.rings.Load(),
	})
}

func (n *Node) setRoleDecision(d role.Decision) {
	n.role.mu.Lock()
	n.role.last, n.role.evaluated = d, true
	n.role.mu.Unlock()
}

// roleService is the supernode's announce and mesh loops (the directory
// driver's Serve, node/dirdriver), started on
// promotion and stopped, and waited for, before the departure
// announcement of a demotion (so that none follows it).
type roleService struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (s *roleService) stop() {
	s.cancel()
	s.wg.Wait()
}

// promoteAuto makes this auto node a supernode: admission opens, the
// relay starts, and the announce loop announces at once.
func (n *Node) promoteAuto(ctx context.Context) *roleService {
	if err := n.announcer.SetRole(protocol.RoleSupernode, n.cfg.Capacity); err != nil {
		n.log.Error("auto role: announcer", "err", err)
	}
	n.admission.SetOpen(true)
	n.serving.Store(true)
	n.dirs.ServingChanged() // the ring is now filtered by confirmation (node/dirdriver)
	if err := n.startRelay(); err != nil {
		n.log.Warn("auto role: relay service", "err", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	svc := &roleService{cancel: cancel}
	svc.wg.Add(1)
	n.goLoop(func() { defer svc.wg.Done(); n.dirs.Serve(sctx) })
	return svc
}

// demoteAuto returns this node to the ordinary role without dropping its
// clients at once: admission closes (new clients are redirected), the
// node keeps announcing with a capacity equal to its remaining load (so
// the network counts no spare room here and the clients are still
// counted), hands its clients to other supernodes over DrainPeriod, and
// only then stops announcing with a departure announcement.
func (n *Node) demoteAuto(ctx context.Context, svc *roleService, why string) {
	n.admission.SetOpen(false)
	shrink := func(load int) {
		n.role.mu.Lock()
		n.role.draining, n.role.drainWhy = load, why
		n.role.mu.Unlock()
		_ = n.announcer.SetRole(protocol.RoleSupernode, max(load, 1))
	}
	shrink(n.load())
	if err := n.dirs.PublishAnnouncement(ctx, false); err != nil && ctx.Err() == nil {
		n.log.Warn("auto role: announce demotion", "err", err)
	}
	n.drainTo(ctx, n.cfg.DrainPeriod, 0, "supernode demoted: "+why, shrink)
	if ctx.Err() != nil {
		// Closing: Close announces the departure and drains the rest.
		return
	}
	if svc != nil {
		svc.stop()
	}
	n.serving.Store(false)
	n.dirs.ServingChanged()
	n.dirs.AnnounceDeparture(ctx)
	n.stopRelay()
	_ = n.announcer.SetRole(protocol.RoleSupernode, n.cfg.Capacity)
	n.role.mu.Lock()
	n.role.draining, n.role.drainWhy = 0, ""
	n.role.mu.Unlock()
	n.log.Info("auto role: now ordinary")
}

// drainTo detaches the clients above keep in ten even steps over period
// (longer if detached clients are slow to leave, see waitDrainStep); each
// Detach spreads its client's move over one step, so they never all move
// in the same instant. each, if set, is told the load before every
// step and once at the end.
func (n *Node) drainTo(ctx context.Context, period time.Duration, keep int, reason string, each func(load int)) {
	step := role.DrainStepInterval(period)
	for i := range role.DrainSteps {
		load := n.admission.Load()
		if each != nil {
			each(load)
		}
		excess := load - keep
		if excess <= 0 {
			return
		}
		k := n.admission.Drain(role.DrainStep(excess, i), reason, step)
		n.log.Debug("drain step", "step", i, "detached", k, "load", load, "reason", reason)
		if !n.waitDrainStep(ctx, step, load-k) {
			return
		}
	}
	if each != nil {
		each(n.admission.Load())
	}
}

// drainLinger bounds how long a drain step waits, past its interval, for
// the clients it detached to leave: the admission ends a detached session
// within a second (its read deadline), so a client still there after
// drainLinger is stuck, and the drain goes on without it.
const drainLinger = 2 * time.Second

// waitDrainStep waits one drain step and then, for at most drainLinger,
// until the load is at most target, the load before the step less the
// clients it detached, or until ctx ends (false). The next step counts the
// load again: a client still closing its session would be counted as
// excess a second time (a later step then detached two clients at once)
// and could be picked again instead of another client. The load only falls
// during a drain (admission is closed, or the semaphore is past its limit),
// so the wait ends as soon as the last of them has left.
func (n *Node) waitDrainStep(ctx context.Context, step time.Duration, target int) bool {
	t := time.NewTimer(step)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	if n.admission.Load() <= target {
		return true
	}
	linger := time.NewTimer(drainLinger)
	defer linger.Stop()
	poll := time.NewTicker(max(step/10, time.Millisecond))
	defer poll.Stop()
	for n.admission.Load() > target {
		select {
		case <-ctx.Done():
			return false
		case <-linger.C:
			n.log.Debug("drain step: detached clients still attached", "load", n.admission.Load(), "want", target)
			return true
		case <-poll.C:
		}
	}
	return true
}

// roleChangedAt is when the auto role last changed (zero if never).
func (n *Node) roleChangedAt() time.Time {
	n.role.mu.Lock()
	defer n.role.mu.Unlock()
	return n.role.changedAt
}

// autoRole reports the auto role's state for Role and Status.
func (n *Node) autoRole() (config.Role, string, []role.Criterion) {
	n.role.mu.Lock()
	defer n.role.mu.Unlock()
	r := config.RoleOrdinary
	if n.serving.Load() {
		r = config.RoleSupernode
	}
	switch {
	case n.role.draining > 0 || n.role.drainWhy != "":
		return r, fmt.Sprintf("auto: demoting (%s), handing %d clients to other supernodes", n.role.drainWhy, n.role.draining), n.role.last.Criteria
	case !n.role.evaluated:
		return r, "auto: role not evaluated yet", nil
	}
	return r, "auto: " + n.role.last.Reason, n.role.last.Criteria
}
