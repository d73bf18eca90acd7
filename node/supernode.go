package node

import (
	"math/rand/v2"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/supernode"
	"github.com/overlayd/overlayd/supernode/capacity"
)

// startSupernode sets up the supernode role: capacity semaphores, the
// attach protocol and the announcer.
func (n *Node) startSupernode() error {
	var err error
	n.sems, err = capacity.NewSet(capacity.DefaultLimits(n.cfg.Capacity), capacity.WithRetryAfter(n.cfg.BusyRetryAfter))
	if err != nil {
		return err
	}
	if err := n.sems.Register(n.reg); err != nil {
		return err
	}
	n.admission, err = supernode.NewAdmission(n.host, n.sems.Attached, supernode.AdmissionConfig{
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
	n.admission.Start()
	n.announcer, err = supernode.NewAnnouncer(n.host.ID(), protocol.RoleSupernode, n.cfg.Capacity, n.cfg.AnnounceInterval)
	return err
}

// candidates lists the other supernodes that announced spare capacity, for
// the alternatives of a BUSY answer.
func (n *Node) candidates() []supernode.Candidate {
	snap := n.dir.Snapshot()
	self := n.ID()
	out := make([]supernode.Candidate, 0, snap.Len())
	for _, e := range snap.Entries {
		if e.ID == self || e.Load >= e.Capacity {
			continue
		}
		out = append(out, supernode.Candidate{AddrInfo: peer.AddrInfo{ID: e.ID, Addrs: e.Addrs}, Spare: int(e.Capacity - e.Load)})
	}
	return out
}
