package node

import (
	"context"
	"math/rand/v2"

	"github.com/overlayd/overlayd/node/role"
	"github.com/overlayd/overlayd/node/roledriver"
	"github.com/overlayd/overlayd/protocol"
)

// The node's wiring of the --role auto driver (package node/roledriver;
// the rules are node/role's). An auto node builds both sides at Start: the
// client (node/client) and the supernode machinery (semaphores, admission,
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

var (
	_ roledriver.Supernode = autoSupernode{}
	_ roledriver.Announcer = autoSupernode{}
)

// newRoleDriver builds the driver of an auto node; Start calls it once the
// supernode role is built and the node has started.
func (n *Node) newRoleDriver() (*roledriver.Driver, error) {
	return roledriver.New(roledriver.Config{
		Self: n.ID(), Capacity: n.cfg.Capacity, Policy: n.cfg.RolePolicy(),
		EvalInterval: role.EvalInterval(n.cfg.AnnounceInterval), DrainPeriod: n.cfg.DrainPeriod, Started: n.started,
		Dir: n.dir, Ring: n.rings.Load, Reachability: n.Reachability, Serving: n.serving.Load, Mega: n.MegaCert,
		Admission: n.admission, Supernode: autoSupernode{n}, Announcer: autoSupernode{n}, Metrics: n.m.roles,
		Now: n.now, Rand: rand.New(rand.NewPCG(n.seed(), n.seed())), Log: n.log,
	})
}

// autoSupernode is the supernode role of an auto node as its driver
// switches it (roledriver.Supernode and roledriver.Announcer).
type autoSupernode struct{ n *Node }

func (s autoSupernode) Promote(capacity int) {
	n := s.n
	if err := n.announcer.SetRole(protocol.RoleSupernode, capacity); err != nil {
		n.log.Error("auto role: announcer", "err", err)
	}
	n.serving.Store(true)
	n.dirs.ServingChanged() // the ring is now filtered by confirmation (node/dirdriver)
	if err := n.startRelay(); err != nil {
		n.log.Warn("auto role: relay service", "err", err)
	}
}

func (s autoSupernode) Serve(ctx context.Context) { s.n.dirs.Serve(ctx) }

func (s autoSupernode) Retire(ctx context.Context, capacity int) {
	n := s.n
	n.serving.Store(false)
	n.dirs.ServingChanged()
	n.dirs.AnnounceDeparture(ctx)
	n.stopRelay()
	_ = n.announcer.SetRole(protocol.RoleSupernode, capacity)
}

func (s autoSupernode) SetCapacity(c int) { _ = s.n.announcer.SetRole(protocol.RoleSupernode, c) }

func (s autoSupernode) Announce(ctx context.Context) error {
	return s.n.dirs.PublishAnnouncement(ctx, false)
}
