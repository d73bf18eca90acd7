package node

import (
	"errors"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/node/dirdriver"
)

// The node's wiring of its directory driver (package node/dirdriver): the
// GossipSub router and the announcement topic, this supernode's
// announcements, expiry, the supernode mesh, confirmations and the ring
// built from the directory. The driver is given the host, the directory,
// the ring and the node's clock, seeds, logger and metrics; it reaches
// the supernode role through supernodeAnnouncer, load and serving, and
// tells the router of every ring published (ringChanged).

var _ dirdriver.Announcer = supernodeAnnouncer{}

// newDirDriver builds the node's directory driver. Start calls it once the
// host and the metrics exist, before the directory hears anything.
func (n *Node) newDirDriver() (*dirdriver.Driver, error) {
	announce, _ := n.cfg.AnnounceMultiaddrs() // checked by Validate
	return dirdriver.New(dirdriver.Config{
		Host:             n.host,
		Dir:              n.dir,
		Rings:            &n.rings,
		Bootstrap:        n.bootstrap,
		AnnounceInterval: n.cfg.AnnounceInterval,
		AnnounceAddrs:    announce,
		ConnBudget:       n.cfg.ConnBudget(),
		PartialView:      n.cfg.PartialView(),
		ServesViews:      n.cfg.Role != config.RoleOrdinary,
		MayServe:         n.cfg.Role == config.RoleSupernode || n.cfg.Role == config.RoleAuto,
		Certified:        n.cfg.Certified(),
		Debounce:         n.debounc,
		Serving:          n.serving.Load,
		Announcer:        supernodeAnnouncer{n},
		Load:             n.load,
		Published:        n.ringChanged,
		Now:              n.now,
		Seed:             n.seed,
		Log:              n.log,
		Metrics:          n.m.dir,
	})
}

// supernodeAnnouncer is the supernode's announcer as the driver sees it
// (dirdriver.Announcer). startSupernode builds the announcer after the
// driver, so it is read at each call; the driver announces only while the
// node plays the supernode role, which has one.
type supernodeAnnouncer struct{ n *Node }

func (a supernodeAnnouncer) Next(addrs []ma.Multiaddr, load int, departing bool, now time.Time) ([]byte, error) {
	if a.n.announcer == nil {
		return nil, errors.New("announce: the node has no supernode role")
	}
	return a.n.announcer.Next(addrs, load, departing, now)
}

func (a supernodeAnnouncer) SetInterval(iv time.Duration) error {
	if a.n.announcer == nil {
		return errors.New("announce interval: the node has no supernode role")
	}
	return a.n.announcer.SetInterval(iv)
}

// load is the number of attached clients reported in announcements.
func (n *Node) load() int {
	if n.admission == nil {
		return 0
	}
	return n.admission.Load()
}

// ringChanged tells the supernode's router (when this node runs one) that
// the ring was published: it drops its records of the groups the ring no
// longer makes it home to (supernode.Router.RingChanged).
func (n *Node) ringChanged() {
	if n.router != nil {
		n.router.RingChanged()
	}
}
