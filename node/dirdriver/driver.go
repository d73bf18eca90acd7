package dirdriver

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
)

// Announcer makes this node's announcements (supernode.Announcer, through
// the node).
type Announcer interface {
	// Next returns the next signed announcement of addrs and load.
	Next(addrs []ma.Multiaddr, load int, departing bool, now time.Time) ([]byte, error)
	// SetInterval sets the interval later announcements carry.
	SetInterval(interval time.Duration) error
}

// Config is what a Driver needs of the node. Host, Dir, Rings, Serving,
// Load, Published, Now, Seed, Log and Metrics are required.
type Config struct {
	// Host is the node's host: GossipSub runs on it, and the mesh,
	// bootstrap and confirmation loops dial and watch its connections.
	Host host.Host
	// Dir is the node's directory, which the topic's validator feeds.
	Dir *directory.Directory
	// Rings is the node's published ring; the ring loop and PublishRing
	// publish on it.
	Rings *ring.Published
	// Bootstrap are the node's bootstrap peers (Run keeps it connected
	// to them).
	Bootstrap []peer.AddrInfo
	// AnnounceInterval is the node's announce interval (--announce-interval);
	// the tier's may be longer (protocol.AnnounceInterval).
	AnnounceInterval time.Duration
	// AnnounceAddrs are the configured addresses to announce
	// (--announce-addr); none: the host's listen addresses.
	AnnounceAddrs []ma.Multiaddr
	// ConnBudget is how many peers the node may hold connections to; a
	// supernode's GossipSub mesh keeps every one of them (gossipParams).
	ConnBudget int
	// PartialView is a node that keeps a partial view of the directory
	// (node/viewclient) instead of hearing the announcement topic: Join
	// starts GossipSub (the revocations still use it) but does not join
	// the topic, Run builds no ring (the view client publishes it), and
	// the directory has no limits.
	PartialView bool
	// ServesViews keeps each accepted announcement's signed message with
	// its entry, so that the node can serve it in views (overlay/view):
	// every node but a pinned ordinary one.
	ServesViews bool
	// MayServe is a node that plays the supernode role or may take it
	// (--role supernode or auto): Run confirms announced supernodes.
	MayServe bool
	// Certified is a certified network: the operator's certificate is the
	// gate, and no ring is filtered by confirmation.
	Certified bool
	// Debounce is how long the ring loop waits after a directory change
	// before it rebuilds the ring.
	Debounce time.Duration
	// Serving reports whether the node plays the supernode role now.
	Serving func() bool
	// Announcer makes the node's announcements; used only by Serve,
	// PublishAnnouncement and AnnounceDeparture.
	Announcer Announcer
	// Load is the number of clients attached, reported in announcements.
	Load func() int
	// Published is called after every ring published (also an empty
	// one); it must not block.
	Published func()
	// Now is the node's clock; Seed gives a seed for each of the random
	// sources the driver makes (the announce schedule).
	Now  func() time.Time
	Seed func() uint64
	// Log is the node's logger: the driver's lines are the node's.
	Log     *slog.Logger
	Metrics *Metrics
}

// Driver drives the node's directory and ring; see the package doc.
type Driver struct {
	cfg     Config
	m       *Metrics
	log     *slog.Logger
	now     func() time.Time
	confirm *confirmations

	// Set by Join; read-only afterwards.
	ps    *pubsub.PubSub
	topic *pubsub.Topic
	sub   *pubsub.Subscription
	// heardSince is when this node began hearing the announcement
	// topic (zero: it does not hear it).
	heardSince time.Time
}

// New returns a Driver of cfg. It does no I/O and starts nothing.
func New(cfg Config) (*Driver, error) {
	if cfg.Host == nil || cfg.Dir == nil || cfg.Rings == nil || cfg.Serving == nil || cfg.Load == nil ||
		cfg.Published == nil || cfg.Now == nil || cfg.Seed == nil || cfg.Log == nil || cfg.Metrics == nil {
		return nil, errors.New("dirdriver: Config needs Host, Dir, Rings, Serving, Load, Published, Now, Seed, Log and Metrics")
	}
	if cfg.AnnounceInterval <= 0 {
		return nil, errors.New("dirdriver: Config.AnnounceInterval must be positive")
	}
	if cfg.Debounce < 0 {
		return nil, errors.New("dirdriver: Config.Debounce must not be negative")
	}
	return &Driver{
		cfg:     cfg,
		m:       cfg.Metrics,
		log:     cfg.Log,
		now:     cfg.Now,
		confirm: newConfirmations(),
	}, nil
}

// PubSub is the node's GossipSub router (nil before Join): the
// revocation topic joins it too.
func (d *Driver) PubSub() *pubsub.PubSub { return d.ps }

// Run does what every node does until ctx ends: it reads the announcement
// topic's subscription (if Join joined it), expires entries, keeps the
// node connected to its bootstrap peers, confirms announced supernodes (a
// node that may serve) and rebuilds the ring (a node that hears the
// topic). It waits for the goroutines it starts.
func (d *Driver) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	do := func(f func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(ctx)
		}()
	}
	if d.sub != nil {
		do(d.drain)
	}
	if !d.cfg.PartialView {
		do(d.ringLoop)
	}
	do(d.bootstrapLoop)
	if d.cfg.MayServe {
		do(d.confirmLoop)
	}
	d.expireLoop(ctx)
}

// Serve does what a serving supernode does until ctx ends: it announces
// this node (at once, then on the announce schedule) and keeps it
// connected to every supernode of its directory. The node runs it while it
// plays the supernode role, and waits for it to end before the departure
// announcement (AnnounceDeparture), so that none follows that one.
func (d *Driver) Serve(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.meshLoop(ctx)
	}()
	d.announceLoop(ctx)
}

// tierInterval is the interval the supernode tier announces at, by this
// node's directory: the configured one, stretched for a large tier
// (protocol.AnnounceInterval).
func (d *Driver) tierInterval() time.Duration {
	return protocol.AnnounceInterval(d.cfg.AnnounceInterval, d.cfg.Dir.Snapshot().Len())
}

// settleIntervals is how many of the tier's announce intervals a node
// hears the announcement topic before its directory counts as settled:
// every live supernode announces once an interval, and the second is
// margin for gossip and for an announcer whose timer had just fired when
// this node subscribed.
const settleIntervals = 2

// Settled reports whether this node has heard the announcement topic for
// settleIntervals of the tier's interval, so that its directory holds the
// live supernodes and its ring is the network's. A supernode takes no
// group home role before (supernode.RouterConfig.Settled): just started,
// its ring holds a few supernodes, at first itself alone.
func (d *Driver) Settled() bool {
	return !d.heardSince.IsZero() && !d.now().Before(d.heardSince.Add(settleIntervals*d.tierInterval()))
}

// ExpiryTick is how often a node looks for expired entries: a tenth of
// the announce interval, within [10 ms, 1 s].
func ExpiryTick(interval time.Duration) time.Duration {
	return min(max(interval/10, 10*time.Millisecond), time.Second)
}

// expireLoop removes entries whose supernodes stopped announcing. On a
// node that hears the topic it also keeps the directory's limits at the
// tier's interval: announcements of a large tier come less often and
// live longer (protocol.AnnounceInterval), and the clamp and the rate
// limits follow.
func (d *Driver) expireLoop(ctx context.Context) {
	t := time.NewTicker(ExpiryTick(d.cfg.AnnounceInterval))
	defer t.Stop()
	limited := d.cfg.AnnounceInterval
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if iv := d.tierInterval(); !d.cfg.PartialView && iv != limited {
				limited = iv
				d.cfg.Dir.SetLimits(directory.DefaultLimits(iv))
				d.log.Info("announce interval follows the tier", "interval", iv, "supernodes", d.cfg.Dir.Snapshot().Len())
			}
			for _, ev := range d.cfg.Dir.Expire(d.now()) {
				d.log.Info("supernode expired", "peer", ev.ID.ShortString())
			}
		}
	}
}
