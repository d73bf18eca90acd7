package viewclient

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
)

const (
	// distrust is how long a supernode whose view was outvoted is
	// neither asked for views nor attached to.
	distrust = 10 * time.Minute
	// retryMin is the first wait after a refresh that found no server;
	// it doubles up to the announce interval.
	retryMin = 250 * time.Millisecond
	// serversPerRefresh bounds the supernodes one refresh asks.
	serversPerRefresh = 4
	fetchTimeout      = 5 * time.Second
	// strikes is how many cross-checks in a row may find the node's
	// supernode on another ring version than the checker, with another
	// home, before the home members are asked: rings differ for a
	// refresh or two while supernodes come and go, and a supernode that
	// answers with a version of its own for longer is judged as if it
	// claimed the checker's.
	strikes = 3
)

// Session is what the Client needs of the node's client side
// (node/client.Client, through the node's adapter).
type Session interface {
	// Supernode is the supernode the node is attached to, if any.
	Supernode() (peer.ID, bool)
	// Groups are the groups the node joined; their keys' neighbourhoods
	// are part of the view.
	Groups() []string
	// Distrust makes the client side leave p and not attach to it for d.
	Distrust(p peer.ID, d time.Duration, why string)
}

// Config is what a Client needs of the node. Every field is required.
type Config struct {
	// Host is the node's host: views are asked for on it, and its
	// connections and peerstore name supernodes to ask.
	Host host.Host
	// Dir is the node's directory; it holds only the latest view.
	Dir *directory.Directory
	// Rings is the node's published ring, read to skip publishing a ring
	// of the members it already has.
	Rings *ring.Published
	// Publish builds the ring of members and publishes it; version is the
	// version of the server's ring the members were taken from.
	Publish func(members []ring.Member, version string)
	// Session is the node's client side.
	Session Session
	// Bootstrap are the node's bootstrap peers.
	Bootstrap []peer.AddrInfo
	// AnnounceInterval is the node's own announce interval: the longest
	// wait after a refresh that found no server, and the shortest
	// between refreshes.
	AnnounceInterval time.Duration
	// Now is the node's clock; Rand the Client's random source, used only
	// by Run's goroutine.
	Now  func() time.Time
	Rand *rand.Rand
	Log  *slog.Logger
	// Metrics are the view series (NewMetrics), registered by the node
	// whether or not it keeps a view.
	Metrics *Metrics
}

// Client keeps the node's partial view of the directory.
type Client struct {
	cfg     Config
	m       *Metrics
	log     *slog.Logger
	kick    chan struct{}
	version atomic.Value // string: the ring version of the adopted view

	// Owned by Run's goroutine.
	rng        *rand.Rand
	distrusted map[peer.ID]time.Time // supernodes outvoted, until when
	strikes    map[peer.ID]int       // cross-checks in a row on another version with another home
}

// New returns a Client of cfg. It does no I/O and starts nothing.
func New(cfg Config) (*Client, error) {
	if cfg.Host == nil || cfg.Dir == nil || cfg.Rings == nil || cfg.Publish == nil || cfg.Session == nil ||
		cfg.Now == nil || cfg.Rand == nil || cfg.Log == nil || cfg.Metrics == nil {
		return nil, errors.New("viewclient: Config needs Host, Dir, Rings, Publish, Session, Now, Rand, Log and Metrics")
	}
	if cfg.AnnounceInterval <= 0 {
		return nil, errors.New("viewclient: Config.AnnounceInterval must be positive")
	}
	return &Client{
		cfg:        cfg,
		m:          cfg.Metrics,
		log:        cfg.Log,
		kick:       make(chan struct{}, 1),
		rng:        cfg.Rand,
		distrusted: map[peer.ID]time.Time{},
		strikes:    map[peer.ID]int{},
	}, nil
}

// Version is the version of the ring the adopted view was taken from (""
// before the first).
func (c *Client) Version() string {
	v, _ := c.version.Load().(string)
	return v
}

// Kick asks Run for a refresh now (a group was joined: its home must be
// on the ring before its messages come). It never blocks.
func (c *Client) Kick() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Run refreshes the partial view until ctx ends: once per interval after
// a refresh a supernode answered, sooner (doubling from retryMin) after
// one none did, and at once when kicked.
func (c *Client) Run(ctx context.Context) {
	retry := retryMin
	for {
		d := retry
		if c.refresh(ctx) {
			retry = retryMin
			d = c.interval()
			d -= time.Duration(c.rng.Int64N(int64(d/10) + 1))
		} else {
			retry = min(2*retry, c.cfg.AnnounceInterval)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-c.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// interval is the wait between refreshes: the shortest announce interval
// among the view's entries (they expire after
// protocol.MissedAnnouncements of them), at least the node's own.
func (c *Client) interval() time.Duration {
	es := c.cfg.Dir.Snapshot().Entries
	if len(es) == 0 {
		return c.cfg.AnnounceInterval
	}
	iv := protocol.MaxAnnounceInterval
	for _, e := range es {
		iv = min(iv, protocol.ClampInterval(e.Interval, 0))
	}
	return max(iv, c.cfg.AnnounceInterval)
}

// refresh fetches the view from the first supernode that answers with a
// ring, makes it the node's directory and ring, and cross-checks it. It
// reports whether a supernode answered.
func (c *Client) refresh(ctx context.Context) bool {
	now := c.cfg.Now()
	for p, t := range c.distrusted {
		if !now.Before(t) {
			delete(c.distrusted, p)
		}
	}
	var primary *fetched
	tried := map[peer.ID]bool{}
	for range serversPerRefresh {
		// The candidates again after every answer: a hint from an
		// ordinary peer (entries, no ring) names supernodes to ask.
		i := slices.IndexFunc(c.servers(), func(ai peer.AddrInfo) bool { return !tried[ai.ID] })
		if i < 0 {
			break
		}
		ai := c.servers()[i]
		tried[ai.ID] = true
		f, err := c.fetchFull(ctx, ai)
		if err != nil {
			c.log.Debug("view fetch", "supernode", ai.ID.ShortString(), "err", err)
			continue
		}
		if len(f.members) > 0 {
			primary = f
			break
		}
	}
	if primary == nil {
		return false
	}
	c.adopt(primary)
	c.crossCheck(ctx, primary)
	return true
}

// adopt makes f the node's view: the directory keeps only f's entries and
// the ring is built from f's members.
func (c *Client) adopt(f *fetched) {
	c.cfg.Dir.Retain(func(p peer.ID) bool { return slices.Contains(f.entries, p) })
	c.version.Store(f.version)
	if r := c.cfg.Rings.Load(); r != nil && slices.Equal(r.Members(), f.members) {
		return
	}
	c.cfg.Publish(f.members, f.version)
}

// servers lists the supernodes to ask for the view, in order: the one the
// node is attached to, connected bootstrap peers, the view's regular
// supernodes at random, connected peers that speak the view protocol
// (identify told), then the other bootstrap peers; none distrusted, not
// the node itself, at most serversPerRefresh.
func (c *Client) servers() []peer.AddrInfo {
	h := c.cfg.Host
	var out []peer.AddrInfo
	add := func(ai peer.AddrInfo) {
		if _, bad := c.distrusted[ai.ID]; bad || ai.ID == h.ID() || len(out) >= serversPerRefresh ||
			slices.ContainsFunc(out, func(x peer.AddrInfo) bool { return x.ID == ai.ID }) {
			return
		}
		out = append(out, ai)
	}
	if sn, ok := c.cfg.Session.Supernode(); ok {
		add(peer.AddrInfo{ID: sn})
	}
	for _, b := range c.cfg.Bootstrap {
		if h.Network().Connectedness(b.ID) == network.Connected {
			add(b)
		}
	}
	es := c.cfg.Dir.Snapshot().Entries
	for _, i := range c.rng.Perm(len(es)) {
		if es[i].Role == protocol.RoleSupernode || es[i].Role == protocol.RoleMega {
			add(peer.AddrInfo{ID: es[i].ID, Addrs: es[i].Addrs})
		}
	}
	// Peers it is connected to that speak the view protocol (found by
	// mDNS, or that connected to it), then any bootstrap peer, connected
	// or not.
	for _, p := range h.Network().Peers() {
		if ps, err := h.Peerstore().SupportsProtocols(p, protocol.ViewID); err == nil && len(ps) > 0 {
			add(peer.AddrInfo{ID: p})
		}
	}
	for _, b := range c.cfg.Bootstrap {
		add(b)
	}
	return out
}

// keys are the keys the node's view covers: its own, then its groups'.
func (c *Client) keys() [][]byte {
	keys := [][]byte{[]byte(c.cfg.Host.ID())}
	for _, g := range c.cfg.Session.Groups() {
		keys = append(keys, []byte(g))
	}
	return keys
}
