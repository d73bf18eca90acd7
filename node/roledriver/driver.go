package roledriver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/role"
	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
)

// Admission is the supernode's admission as the driver closes and drains
// it (*supernode.Admission).
type Admission interface {
	// Load is the number of attached clients.
	Load() int
	// SetOpen opens admission, or closes it (attaches are redirected).
	SetOpen(open bool)
	// Drain detaches up to k clients, spreading their moves over spread,
	// and returns how many it detached.
	Drain(k int, reason string, spread time.Duration) int
}

// Supernode is the supernode role as the driver switches it on and off:
// the node's announcer, serving flag, relay service and directory driver.
type Supernode interface {
	// Promote makes the node serve: it announces the role with capacity,
	// sets the serving flag (the ring is then filtered by confirmation)
	// and starts the relay service. The driver opens admission itself.
	Promote(capacity int)
	// Serve runs the announce and mesh loops until ctx ends.
	Serve(ctx context.Context)
	// Retire ends the role after its drain: the serving flag, the
	// departure announcement, the relay service; the announcer is reset
	// to capacity for a later promotion.
	Retire(ctx context.Context, capacity int)
}

// Announcer is what a demotion announces while it drains: the capacity
// shrinks with the load so that the network counts no spare room here.
type Announcer interface {
	// SetCapacity sets the capacity the next announcements carry.
	SetCapacity(capacity int)
	// Announce publishes the node's announcement now.
	Announce(ctx context.Context) error
}

// Config is what the driver is given; every field is required.
type Config struct {
	Self         peer.ID
	Capacity     int
	Policy       role.Policy
	EvalInterval time.Duration // role.EvalInterval of the announce interval
	DrainPeriod  time.Duration
	Started      time.Time // the node's start, for its uptime
	// Dir is the directory: every change is an evaluation.
	Dir          *directory.Directory
	Ring         func() *ring.Ring
	Reachability func() network.Reachability
	Serving      func() bool
	// Mega is the node's mega-supernode certificate: while it holds one
	// the certificate pins the role.
	Mega      func() (protocol.MegaCert, bool)
	Admission Admission
	Supernode Supernode
	Announcer Announcer
	Metrics   *Metrics
	Now       func() time.Time
	Rand      *rand.Rand
	Log       *slog.Logger
}

// Driver is the --role auto driver. Its Run goroutine evaluates role.Decide
// and makes every role change, so promotions and demotions never overlap;
// the other methods report its state and are safe for concurrent use.
type Driver struct {
	cfg Config

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

// New checks cfg and returns a driver. It starts nothing.
func New(cfg Config) (*Driver, error) {
	if cfg.Dir == nil || cfg.Ring == nil || cfg.Reachability == nil || cfg.Serving == nil || cfg.Mega == nil ||
		cfg.Admission == nil || cfg.Supernode == nil || cfg.Announcer == nil || cfg.Metrics == nil ||
		cfg.Now == nil || cfg.Rand == nil || cfg.Log == nil || cfg.EvalInterval <= 0 {
		return nil, errors.New("roledriver: incomplete Config")
	}
	return &Driver{cfg: cfg}, nil
}

// noteChange records a role change made on dec.
func (d *Driver) noteChange(dec role.Decision) {
	why := dec.Reason
	for _, c := range dec.Criteria {
		if c.Name == role.CritNeeded || c.Name == role.CritSurplus {
			why += "; " + c.Detail
		}
	}
	d.mu.Lock()
	d.changedAt, d.changeWhy = d.cfg.Now(), why
	d.mu.Unlock()
}

// Run evaluates the role rules on every directory change and every
// EvalInterval, and carries out promotions and demotions, until ctx
// ends. It waits for the loops it started.
func (d *Driver) Run(ctx context.Context) {
	changes, cancel := d.cfg.Dir.Subscribe()
	defer cancel()
	tick := time.NewTicker(d.cfg.EvalInterval)
	defer tick.Stop()
	var st role.State
	var svc *service
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
		if c, ok := d.cfg.Mega(); ok {
			// An operator made this node a mega-supernode: the certificate
			// pins the role until it is demoted.
			d.setDecision(role.Decision{Reason: fmt.Sprintf("mega-supernode by operator certificate %d", c.Serial)})
			st = role.State{}
			continue
		}
		var dec role.Decision
		dec, st = role.Decide(d.cfg.Policy, d.input(), st, d.cfg.Rand)
		d.setDecision(dec)
		switch dec.Action {
		case role.Promote:
			d.cfg.Log.Info("auto role: promoting to supernode", "why", dec.Reason)
			d.noteChange(dec)
			d.cfg.Metrics.changes.WithLabelValues("supernode").Inc()
			svc = d.promote(ctx)
		case role.Demote:
			d.cfg.Log.Info("auto role: demoting to ordinary", "why", dec.Reason, "drain", d.cfg.DrainPeriod)
			d.noteChange(dec)
			d.cfg.Metrics.changes.WithLabelValues("ordinary").Inc()
			d.demote(ctx, svc, dec.Reason)
			svc = nil
		}
	}
}

// input gathers role.Decide's input (role.NewInput): the directory,
// with this node's own entry taken from its live state (present with its
// capacity and load while serving, absent otherwise).
func (d *Driver) input() role.Input {
	now := d.cfg.Now()
	return role.NewInput(role.View{
		Now:          now,
		Self:         d.cfg.Self,
		Serving:      d.cfg.Serving(),
		Reachability: d.cfg.Reachability(),
		Uptime:       now.Sub(d.cfg.Started),
		Capacity:     d.cfg.Capacity,
		Load:         d.cfg.Admission.Load(),
		Snapshot:     d.cfg.Dir.Snapshot(),
		Ring:         d.cfg.Ring(),
	})
}

func (d *Driver) setDecision(dec role.Decision) {
	d.mu.Lock()
	d.last, d.evaluated = dec, true
	d.mu.Unlock()
}

// service is the supernode's announce and mesh loops (Supernode.Serve),
// started on promotion and stopped, and waited for, before the departure
// announcement of a demotion (so that none follows it).
type service struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (s *service) stop() {
	s.cancel()
	s.wg.Wait()
}

// promote makes this auto node a supernode: admission opens, the relay
// starts, and the announce loop announces at once.
func (d *Driver) promote(ctx context.Context) *service {
	d.cfg.Admission.SetOpen(true)
	d.cfg.Supernode.Promote(d.cfg.Capacity)
	sctx, cancel := context.WithCancel(ctx)
	svc := &service{cancel: cancel}
	svc.wg.Add(1)
	go func() { defer svc.wg.Done(); d.cfg.Supernode.Serve(sctx) }()
	return svc
}

// demote returns this node to the ordinary role without dropping its
// clients at once: admission closes (new clients are redirected), the
// node keeps announcing with a capacity equal to its remaining load (so
// the network counts no spare room here and the clients are still
// counted), hands its clients to other supernodes over DrainPeriod, and
// only then stops announcing with a departure announcement.
func (d *Driver) demote(ctx context.Context, svc *service, why string) {
	d.cfg.Admission.SetOpen(false)
	shrink := func(load int) {
		d.mu.Lock()
		d.draining, d.drainWhy = load, why
		d.mu.Unlock()
		d.cfg.Announcer.SetCapacity(max(load, 1))
	}
	shrink(d.cfg.Admission.Load())
	if err := d.cfg.Announcer.Announce(ctx); err != nil && ctx.Err() == nil {
		d.cfg.Log.Warn("auto role: announce demotion", "err", err)
	}
	Drain(ctx, d.cfg.Admission, d.cfg.DrainPeriod, 0, "supernode demoted: "+why, shrink, d.cfg.Log)
	if ctx.Err() != nil {
		// Closing: the node announces the departure and drains the rest.
		return
	}
	if svc != nil {
		svc.stop()
	}
	d.cfg.Supernode.Retire(ctx, d.cfg.Capacity)
	d.mu.Lock()
	d.draining, d.drainWhy = 0, ""
	d.mu.Unlock()
	d.cfg.Log.Info("auto role: now ordinary")
}

// ChangedAt is when the role last changed (zero if never).
func (d *Driver) ChangedAt() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.changedAt
}

// ChangeReason is why the role last changed: the decision's reason and
// the criteria that made it ("" if it never changed).
func (d *Driver) ChangeReason() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.changeWhy
}

// State reports why the node plays the role it plays now, and the
// criteria of the last evaluation.
func (d *Driver) State() (why string, criteria []role.Criterion) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.draining > 0 || d.drainWhy != "":
		return fmt.Sprintf("auto: demoting (%s), handing %d clients to other supernodes", d.drainWhy, d.draining), d.last.Criteria
	case !d.evaluated:
		return "auto: role not evaluated yet", nil
	}
	return "auto: " + d.last.Reason, d.last.Criteria
}
