package role

import (
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
)

// EvalInterval is how often an auto node evaluates its role besides on
// directory changes: a quarter of the announce interval, within
// [20 ms, 5 s]. The daemon's ticker starts when the node does and has no
// jitter.
func EvalInterval(announceInterval time.Duration) time.Duration {
	return min(max(announceInterval/4, 20*time.Millisecond), 5*time.Second)
}

// View is what an auto node knows when it evaluates its role: its own
// state and the directory and ring it sees.
type View struct {
	Now          time.Time
	Self         peer.ID
	Serving      bool
	Reachability network.Reachability
	Uptime       time.Duration
	// Capacity is the node's configured capacity; Load its attached
	// clients (counted only while serving).
	Capacity, Load int
	// Snapshot is the node's directory (nil: empty); Ring the ring built
	// from it (nil: none yet).
	Snapshot *directory.Snapshot
	Ring     *ring.Ring
}

// NewInput builds Decide's Input from v as the daemon does: every
// directory entry but the node's own, its capacity clamped by
// cluster.Capacity (made-up giant supernodes must not talk auto nodes out
// of promoting) and megas marked; while serving, the node's own entry from
// its live state (its configured capacity and load) rather than from the
// directory; and the home cluster it would have as an ordinary node
// (cluster.HomeWithout).
func NewInput(v View) Input {
	return Input{
		Now:          v.Now,
		Serving:      v.Serving,
		Reachability: v.Reachability,
		Uptime:       v.Uptime,
		Capacity:     v.Capacity,
		Self:         v.Self,
		Supernodes:   Entries(v.Snapshot, v.Self, v.Serving, v.Capacity, v.Load),
		Home:         cluster.HomeWithout(v.Ring, []byte(v.Self), v.Self),
	}
}

// Entries is the directory as Decide sees it from node self (see
// NewInput); capacity and load are self's, used only while serving.
func Entries(snap *directory.Snapshot, self peer.ID, serving bool, capacity, load int) []Entry {
	var in []directory.Entry
	if snap != nil {
		in = snap.Entries
	}
	es := make([]Entry, 0, len(in)+1)
	for _, e := range in {
		if e.ID == self {
			continue
		}
		es = append(es, Entry{ID: e.ID, Mega: e.Role == protocol.RoleMega, Capacity: cluster.Capacity(e), Load: int(e.Load)})
	}
	if serving {
		es = append(es, Entry{ID: self, Capacity: capacity, Load: load})
	}
	return es
}
