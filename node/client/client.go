package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/overlay/backoff"
	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
)

// Directory is the client's view of the supernode directory
// (*directory.Directory satisfies it).
type Directory interface {
	Snapshot() *directory.Snapshot
}

// Rings is the client's view of the live cluster ring (*ring.Published
// satisfies it). Load returns nil while there is no ring.
type Rings interface {
	Load() *ring.Ring
}

var (
	_ Directory = (*directory.Directory)(nil)
	_ Rings     = (*ring.Published)(nil)
)

// Config holds the client's timing. The node derives it from its own
// Config; every duration must be positive.
type Config struct {
	// AnnounceInterval is the directory's announce interval: the client
	// waits about that long for the directory before its first pass, and
	// skips a supernode that redirected it for that long.
	AnnounceInterval time.Duration
	// RingDebounce is how long the node waits after a directory change
	// before rebuilding the ring; the first wait covers two of them.
	RingDebounce time.Duration
	// RetryBase and RetryMax bound the backoff between failed passes
	// (full jitter above the supernodes' retry-after).
	RetryBase, RetryMax time.Duration
	// ReturnInterval is the mean pause between checks for room at home
	// while attached away from the home cluster.
	ReturnInterval time.Duration
	// AckTimeout is how long a request waits for its answer before it is
	// sent again.
	AckTimeout time.Duration
	// Bootstrap peers are asked when the directory is still empty: they
	// may be supernodes.
	Bootstrap []peer.AddrInfo
}

func (c Config) validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"AnnounceInterval", c.AnnounceInterval}, {"RetryBase", c.RetryBase}, {"RetryMax", c.RetryMax},
		{"ReturnInterval", c.ReturnInterval}, {"AckTimeout", c.AckTimeout},
	} {
		if d.v <= 0 {
			return fmt.Errorf("client: %s must be positive, not %v", d.name, d.v)
		}
	}
	if c.RingDebounce < 0 {
		return fmt.Errorf("client: RingDebounce must not be negative, not %v", c.RingDebounce)
	}
	return nil
}

// Option configures a Client beyond its Config.
type Option func(*Client) error

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(c *Client) error {
		if l == nil {
			return errors.New("client.WithLogger: nil logger")
		}
		c.log = l
		return nil
	}
}

// WithRegisterer registers the client's overlayd_client_* series on reg
// (default: not registered).
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(c *Client) error {
		if reg == nil {
			return errors.New("client.WithRegisterer: nil registerer")
		}
		c.reg = reg
		return nil
	}
}

// WithClock sets the clock (default: time.Now).
func WithClock(now func() time.Time) Option {
	return func(c *Client) error {
		if now == nil {
			return errors.New("client.WithClock: nil clock")
		}
		c.now = now
		return nil
	}
}

// WithRand sets the random source of the client's choices (jitter,
// candidate order). Run owns it: nothing else may use it afterwards.
// Default: a randomly seeded source.
func WithRand(rng *rand.Rand) Option {
	return func(c *Client) error {
		if rng == nil {
			return errors.New("client.WithRand: nil source")
		}
		c.rng = rng
		return nil
	}
}

// WithRetryStrategy replaces the backoff between failed passes; f gets the
// client's random source. For comparing policies in tests and benchmarks.
func WithRetryStrategy(f func(*rand.Rand) backoff.Strategy) Option {
	return func(c *Client) error {
		if f == nil {
			return errors.New("client.WithRetryStrategy: nil factory")
		}
		c.retryFactory = f
		return nil
	}
}

// WithoutJitterForTest skips the stagger of the first pass and of
// failovers: with a fixed retry strategy, the naive client that the
// testnet's storm scenario shows failing.
func WithoutJitterForTest() Option {
	return func(c *Client) error {
		c.noJitter = true
		return nil
	}
}

// WithAttachGateForTest holds the first attach pass until gate is closed,
// so a test can start many clients, let them connect, and then make them
// all attach in the same instant.
func WithAttachGateForTest(gate <-chan struct{}) Option {
	return func(c *Client) error {
		c.gate = gate
		return nil
	}
}

// WithObserver calls f for every Event. f is called from the client's
// goroutines and must not block.
func WithObserver(f func(Event)) Option {
	return func(c *Client) error {
		c.observe = f
		return nil
	}
}

// WithSessionHook calls f when a session with supernode sn starts, and the
// function f returns when that session ends. The node moves its circuit
// relay reservation with it. f must not block.
func WithSessionHook(f func(sn peer.ID) (ended func())) Option {
	return func(c *Client) error {
		c.onSession = f
		return nil
	}
}

// WithPartialView says the client's directory and ring come from a
// partial view (overlay/view): groupsChanged is called after every Join
// and Leave, so that the view covers the group's home, and a group
// message's stamper need not be in the directory (mayBeHome). groupsChanged
// must not block. (Run still waits for the ring to settle: the first view
// may come from a supernode whose own ring is not complete yet, while the
// network forms.)
func WithPartialView(groupsChanged func()) Option {
	return func(c *Client) error {
		c.partialView, c.groupsChanged = true, groupsChanged
		return nil
	}
}

// Client is the ordinary node's side of attach and messaging; see the
// package documentation.
type Client struct {
	h     host.Host
	key   crypto.PrivKey // the host's identity: signs and opens messages
	dir   Directory
	rings Rings
	cfg   Config

	log          *slog.Logger
	reg          prometheus.Registerer
	now          func() time.Time
	rng          *rand.Rand // Run's
	retryFactory func(*rand.Rand) backoff.Strategy
	retry        backoff.Strategy // Run's
	noJitter     bool
	gate         <-chan struct{}
	observe      func(Event)
	onSession    func(peer.ID) func()
	// partialView, groupsChanged: WithPartialView.
	partialView   bool
	groupsChanged func()
	m             *metrics

	// Run's own state.
	notBefore map[peer.ID]time.Time // supernodes that asked us to wait
	lastSeq   uint64                // session seq of the newest attempt

	mu        sync.Mutex
	cur       *session
	failovers int
	// distrusted: supernodes Distrust named, until when; Run moves them
	// into notBefore. distrustNow wakes a session with one of them.
	distrusted  map[peer.ID]time.Time
	distrustWhy string
	distrustNow chan struct{}

	msg messenger
}

// New returns a client of host h that plans with dir and rings. It does no
// I/O and starts nothing; Run does the work.
func New(h host.Host, dir Directory, rings Rings, cfg Config, opts ...Option) (*Client, error) {
	if h == nil || dir == nil || rings == nil {
		return nil, errors.New("client: nil host, directory or rings")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	key := h.Peerstore().PrivKey(h.ID())
	if key == nil {
		return nil, errors.New("client: the host's peerstore has no private key for its own ID")
	}
	c := &Client{
		h: h, key: key, dir: dir, rings: rings, cfg: cfg,
		log:       slog.New(slog.DiscardHandler),
		now:       time.Now,
		notBefore: map[peer.ID]time.Time{},
		m:         newMetrics(),

		distrusted:  map[peer.ID]time.Time{},
		distrustNow: make(chan struct{}, 1),
	}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	if c.rng == nil {
		c.rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	if c.retryFactory != nil {
		c.retry = c.retryFactory(c.rng)
	} else {
		b, err := backoff.New(backoff.Policy{Base: cfg.RetryBase, Max: cfg.RetryMax, MaxRetryAfter: time.Minute}, c.rng)
		if err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		c.retry = b
	}
	if c.reg != nil {
		if err := c.m.register(c.reg); err != nil {
			return nil, fmt.Errorf("client metrics: %w", err)
		}
	}
	c.log = c.log.With("component", "client")
	c.msg.init(c)
	return c, nil
}

// Attachment describes the client's current attachment.
type Attachment struct {
	Supernode peer.ID
	Since     time.Time
	// Home is true when the supernode is a member of the client's home
	// cluster.
	Home bool
	// Failovers counts sessions lost or detached that led to a
	// reattachment, since the client started.
	Failovers int
}

// Attachment returns the current attachment; ok is false while the client
// is not attached (Failovers is set either way).
func (c *Client) Attachment() (a Attachment, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		return Attachment{Failovers: c.failovers}, false
	}
	return Attachment{Supernode: c.cur.peer, Since: c.cur.since, Home: c.cur.home, Failovers: c.failovers}, true
}

// current returns the live session, or nil.
func (c *Client) current() *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
