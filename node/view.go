package node

import (
	"math/rand/v2"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/node/viewclient"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/supernode"
)

// The node's wiring of the directory's second tier: a pinned ordinary
// node keeps a partial view (package node/viewclient) instead of hearing
// the announcement topic, and answers other nodes' view requests from it
// as hints (startViewHints). The view client is given the host, the
// directory, the ring and the client side (viewSession); the client side
// kicks it when a group is joined (client.WithPartialView(n.kickView)).

// PartialView reports whether the node keeps a partial view of the
// directory rather than the whole directory (Config.PartialView).
func (n *Node) PartialView() bool { return n.cfg.PartialView() }

// RingVersion is the version of the ring the node routes by: its own
// ring's, or on a node with a partial view the version of the ring the
// view was taken from ("" before it has one).
func (n *Node) RingVersion() string {
	r := n.rings.Load()
	if r == nil {
		return ""
	}
	if n.views != nil {
		if v := n.views.Version(); v != "" {
			return v
		}
	}
	return r.Version()
}

// newViewClient builds the view client of a node that keeps a partial
// view, on the started host and client side.
func (n *Node) newViewClient() (*viewclient.Client, error) {
	return viewclient.New(viewclient.Config{
		Host:             n.host,
		Dir:              n.dir,
		Rings:            &n.rings,
		Publish:          n.dirs.PublishRing,
		Session:          viewSession{n.client},
		Bootstrap:        n.bootstrap,
		AnnounceInterval: n.cfg.AnnounceInterval,
		Now:              n.now,
		Rand:             rand.New(rand.NewPCG(n.seed(), n.seed())),
		Log:              n.log,
		Metrics:          n.m.view,
	})
}

// kickView asks the view client for a refresh now (a group was joined:
// its home must be on the ring before its messages come).
func (n *Node) kickView() {
	if n.views != nil {
		n.views.Kick()
	}
}

// startViewHints lets this node answer view requests from its own partial
// view, as hints: its entries (each its supernode's own signed message)
// without ring weights, so that a node that joined through it (a
// bootstrap peer or an mDNS neighbour that is an ordinary node) learns
// supernodes to ask for a real view.
func (n *Node) startViewHints() {
	vs := supernode.NewViewServer(func() *ring.Ring { return nil }, n.dir.Snapshot, func() bool { return true }, n.now,
		rand.New(rand.NewPCG(n.seed(), n.seed())), n.base.With("part", "view-hints"))
	n.host.SetStreamHandler(protocol.ViewID, vs.Handle)
}

// viewSession is the client side as the view client sees it.
type viewSession struct{ c *client.Client }

var _ viewclient.Session = viewSession{}

func (s viewSession) Supernode() (peer.ID, bool) {
	a, ok := s.c.Attachment()
	return a.Supernode, ok
}

func (s viewSession) Groups() []string { return s.c.Groups() }

func (s viewSession) Distrust(p peer.ID, d time.Duration, why string) { s.c.Distrust(p, d, why) }
