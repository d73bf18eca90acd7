package node

import (
	"math/rand/v2"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/node/datadir"
	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/supernode"
	"github.com/overlayd/overlayd/supernode/capacity"
	"github.com/overlayd/overlayd/supernode/fanout"
	"github.com/overlayd/overlayd/supernode/store"
)

// StoreFile is the supernode's store in the data dir (supernode/store).
const StoreFile = "store.db"

// startSupernode sets up the supernode role: capacity semaphores, the
// attach protocol, the store and the announcer. A pinned supernode serves at once; an
// auto node keeps it all idle until it promotes.
func (n *Node) startSupernode() error {
	var err error
	n.sems, err = capacity.NewSet(capacity.DefaultLimits(n.cfg.Capacity), capacity.WithRetryAfter(n.cfg.BusyRetryAfter))
	if err != nil {
		return err
	}
	if err := n.sems.Register(n.reg); err != nil {
		return err
	}
	// One pool of writer goroutines (GOMAXPROCS) writes every session's
	// outbox; Close stops it after the sessions.
	if n.writers, err = fanout.NewWriters(0, fanout.WithWritersRegisterer(n.reg)); err != nil {
		return err
	}
	n.writers.Start()
	n.admission, err = supernode.NewAdmission(n.host, n.sems.Attached, supernode.AdmissionConfig{
		Writers:      n.writers,
		Keepalive:    n.cfg.Keepalive,
		RetryAfter:   n.cfg.BusyRetryAfter,
		DetachSpread: n.cfg.AnnounceInterval,
		Candidates:   n.candidates,
		Now:          n.now,
		Rand:         rand.New(rand.NewPCG(n.seed(), n.seed())),
		Log:          n.log,
	})
	if err != nil {
		return err
	}
	n.engine, err = fanout.New(0, fanout.WithRegisterer(n.reg))
	if err != nil {
		return err
	}
	n.engine.Start()
	if err := datadir.Ensure(n.cfg.DataDir); err != nil {
		return err
	}
	lim := store.DefaultLimits()
	lim.MaxBytes = n.cfg.StoreMaxBytes
	if n.storeLimits != nil {
		lim = *n.storeLimits
	}
	// An unreadable store (corrupt, locked by another process) fails the
	// start with the store's error, which names the file: never wiped.
	// WithoutStoreForTest: none (no group resume, replication or offline
	// messages), for comparison.
	if !n.noStore {
		if n.store, err = store.Open(filepath.Join(n.cfg.DataDir, StoreFile), lim, store.WithClock(n.now)); err != nil {
			return err
		}
	}
	n.router, err = supernode.NewRouter(n.host, n.admission, supernode.RouterConfig{
		Ring:        n.rings.Load,
		IsSupernode: n.isSupernode,
		AddrsOf:     n.addrsOf,
		Refresh:     n.cfg.AnnounceInterval,
		Settled:     n.dirs.Settled,
		Sems:        n.sems,
		Fanout:      n.engine,
		Store:       n.store,
		OfflineTTL:  n.cfg.OfflineTTL,

		PerMemberFanoutForTest: n.perMember,
		Now:                    n.now,
		Log:                    n.log,
	})
	if err != nil {
		return err
	}
	if err := n.reg.Register(n.router.Collector()); err != nil {
		return err
	}
	if err := n.reg.Register(n.admission.Collector()); err != nil {
		return err
	}
	n.router.Start()
	n.admission.Start()
	if n.cfg.Role == config.RoleAuto {
		// An auto node starts ordinary: the machinery is built, but it
		// admits nobody and runs no relay until it promotes (autorole.go).
		n.admission.SetOpen(false)
	} else {
		n.serving.Store(true)
		if err := n.startRelay(); err != nil {
			return err
		}
	}
	vs := supernode.NewViewServer(n.rings.Load, n.dir.Snapshot, n.serving.Load, n.now,
		rand.New(rand.NewPCG(n.seed(), n.seed())), n.base.With("part", "view"))
	n.host.SetStreamHandler(protocol.ViewID, vs.Handle)
	n.announcer, err = supernode.NewAnnouncer(n.host.ID(), protocol.RoleSupernode, n.cfg.Capacity, n.cfg.AnnounceInterval)
	return err
}

// isSupernode reports whether p is a live supernode of the directory.
func (n *Node) isSupernode(p peer.ID) bool {
	_, ok := n.dir.Snapshot().Get(p)
	return ok
}

// candidates lists the other supernodes that announced spare capacity, for
// the alternatives of a BUSY answer, weighted by cluster.Spare (announced
// capacity clamped at cluster.MaxCapacity).
func (n *Node) candidates() []supernode.Candidate {
	snap := n.dir.Snapshot()
	self := n.ID()
	out := make([]supernode.Candidate, 0, snap.Len())
	for _, e := range snap.Entries {
		spare := cluster.Spare(e)
		if e.ID == self || spare == 0 {
			continue
		}
		out = append(out, supernode.Candidate{AddrInfo: peer.AddrInfo{ID: e.ID, Addrs: e.Addrs}, Spare: spare})
	}
	return out
}
