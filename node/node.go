package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/overlayd/overlayd/node/api"
	"github.com/overlayd/overlayd/node/circuit"
	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/node/datadir"
	"github.com/overlayd/overlayd/node/dirdriver"
	nodehost "github.com/overlayd/overlayd/node/host"
	"github.com/overlayd/overlayd/node/lan"
	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/node/roledriver"
	"github.com/overlayd/overlayd/node/trust"
	"github.com/overlayd/overlayd/node/tunnel"
	"github.com/overlayd/overlayd/node/viewclient"
	"github.com/overlayd/overlayd/overlay/backoff"
	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/supernode"
	"github.com/overlayd/overlayd/supernode/capacity"
	"github.com/overlayd/overlayd/supernode/fanout"
	"github.com/overlayd/overlayd/supernode/store"
)

// Config is the node's configuration, package node/config's.
type Config = config.Config

// Node is one overlayd daemon.
type Node struct {
	cfg     Config
	log     *slog.Logger
	base    *slog.Logger // the injected logger, for the node's parts
	reg     *prometheus.Registry
	key     crypto.PrivKey
	now     func() time.Time
	debounc time.Duration
	// clientOpts are the options of the client side that tests and
	// benchmarks set through the node's (WithObserver, WithRetryStrategy,
	// WithoutJitterForTest, WithAttachGateForTest).
	clientOpts   []client.Option
	seedFn       func() uint64
	perMember    bool
	storeLimits  *store.Limits // WithStoreLimitsForTest
	noStore      bool          // WithoutStoreForTest
	gater        connmgr.ConnectionGater
	pinnedReach  *network.Reachability // WithReachability
	reach        *circuit.Reach        // the node's public reachability (circuit.go)
	relayBudgets circuit.Budgets       // the host's bandwidth reporter: bytes relayed per peer
	relay        *circuit.Relay        // relay service and reservation (circuit.go); set by startReachability
	// serving is set while the node plays the supernode role: always for
	// --role supernode, between promotion and demotion for --role auto.
	serving atomic.Bool
	roles   *roledriver.Driver // the --role auto driver (autorole.go); nil on the others

	// trust is the operator trust: certificates and revocations
	// (trust.go); set by Start before the directory hears anything.
	trust  *trust.Keeper
	runCtx context.Context // lives from Start to Close

	dir   *directory.Directory
	rings ring.Published
	// dirs drives the directory and the ring: the GossipSub topic,
	// announcements, expiry, confirmations, ring rebuilds (directory.go;
	// package node/dirdriver); set by Start before the directory hears
	// anything.
	dirs *dirdriver.Driver

	// Set by Start; read-only afterwards.
	host      host.Host
	rm        network.ResourceManager
	announcer *supernode.Announcer
	sems      *capacity.Set
	admission *supernode.Admission
	router    *supernode.Router
	engine    *fanout.Engine
	// writers writes the sessions' outboxes; closed after admission.
	writers   *fanout.Writers
	store     *store.Store    // a supernode's replay logs and offline messages; closed last
	client    *client.Client  // ordinary and auto nodes; nil on a pinned supernode
	tunnels   *tunnel.Manager // exposed services and connect listeners (tunnel.go)
	bootstrap []peer.AddrInfo
	// views keeps the partial view of a node that keeps one (view.go;
	// package node/viewclient); nil on the others.
	views     *viewclient.Client
	m         *metrics
	apiSrv    *http.Server
	metricSrv *http.Server
	metricLn  net.Addr // the metrics listener's address, once started
	started   time.Time

	mu      sync.Mutex
	state   int // stateNew, stateStarted, stateClosed
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closeMu sync.Mutex
	// httpCtx is the base context of API requests, cancelled first on
	// Close so that listen streams end and Shutdown does not wait on them.
	httpCtx    context.Context
	httpCancel context.CancelFunc
	abrupt     atomic.Bool
}

const (
	stateNew = iota
	stateStarted
	stateClosed
)

// defaultRegistry is a fresh registry with the Go runtime and process
// collectors, used when no registry is injected.
func defaultRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Option configures a Node beyond its Config.
type Option func(*Node) error

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(n *Node) error {
		if l == nil {
			return errors.New("WithLogger: nil logger")
		}
		n.log = l
		return nil
	}
}

// WithRegistry sets the Prometheus registry the node registers its metrics
// on and serves (default: a fresh one).
func WithRegistry(r *prometheus.Registry) Option {
	return func(n *Node) error {
		if r == nil {
			return errors.New("WithRegistry: nil registry")
		}
		n.reg = r
		return nil
	}
}

// WithIdentity uses key instead of the data dir's identity key file.
func WithIdentity(key crypto.PrivKey) Option {
	return func(n *Node) error {
		if key == nil {
			return errors.New("WithIdentity: nil key")
		}
		n.key = key
		return nil
	}
}

// WithRingDebounce sets how long the node waits after a directory change
// before rebuilding the ring, so a burst of changes costs one rebuild
// (default: a tenth of the announce interval, at most 1 s).
func WithRingDebounce(d time.Duration) Option {
	return func(n *Node) error {
		if d < 0 {
			return fmt.Errorf("WithRingDebounce: negative %v", d)
		}
		n.debounc = d
		return nil
	}
}

// WithRetryStrategy replaces the client's attach retry policy; f gets the
// client's random source. For comparing policies in tests and benchmarks.
func WithRetryStrategy(f func(*rand.Rand) backoff.Strategy) Option {
	return func(n *Node) error {
		n.clientOpts = append(n.clientOpts, client.WithRetryStrategy(f))
		return nil
	}
}

// WithObserver calls f for every event of the node's client side (attach
// attempts, keepalives, session ends). f is called from the client's
// goroutines and must not block.
func WithObserver(f func(client.Event)) Option {
	return func(n *Node) error {
		n.clientOpts = append(n.clientOpts, client.WithObserver(f))
		return nil
	}
}

// WithoutJitterForTest makes the client retry at fixed intervals and skip
// the stagger of its first pass and of its failovers: the naive policy
// that the testnet's storm scenario shows failing.
func WithoutJitterForTest(interval time.Duration) Option {
	return func(n *Node) error {
		if interval <= 0 {
			return fmt.Errorf("WithoutJitterForTest: interval %v must be positive", interval)
		}
		n.clientOpts = append(n.clientOpts, client.WithoutJitterForTest(),
			client.WithRetryStrategy(func(*rand.Rand) backoff.Strategy { return backoff.Fixed(interval) }))
		return nil
	}
}

// WithStoreLimitsForTest replaces the supernode store's limits (quotas,
// MaxBytes; --store-max-bytes is ignored), so tests can reach them.
func WithStoreLimitsForTest(lim store.Limits) Option {
	return func(n *Node) error {
		n.storeLimits = &lim
		return nil
	}
}

// WithPerMemberGroupFanoutForTest makes this node, as a group home, send
// one frame per member instead of one per supernode: the naive design,
// for benchmarks that compare against it.
func WithPerMemberGroupFanoutForTest() Option {
	return func(n *Node) error {
		n.perMember = true
		return nil
	}
}

// WithoutStoreForTest starts the supernode role without its store: no
// replay log, hence no group resume and no home replication, as before
// they existed. For comparisons only (the testnet's NoResume).
func WithoutStoreForTest() Option {
	return func(n *Node) error {
		n.noStore = true
		return nil
	}
}

// WithAttachGateForTest holds the client's first attach pass until gate
// is closed, so a test can start many clients, let them connect, and then
// make them all attach in the same instant.
func WithAttachGateForTest(gate <-chan struct{}) Option {
	return func(n *Node) error {
		n.clientOpts = append(n.clientOpts, client.WithAttachGateForTest(gate))
		return nil
	}
}

// WithConnectionGater installs a libp2p connection gater on the node's
// host: the testnet partitions a network with one.
func WithConnectionGater(g connmgr.ConnectionGater) Option {
	return func(n *Node) error {
		if g == nil {
			return errors.New("WithConnectionGater: nil gater")
		}
		n.gater = g
		return nil
	}
}

// WithSeed makes the node's random choices (jitter, candidate order)
// reproducible: the testnet derives each node's seed from its own.
func WithSeed(seed uint64) Option {
	return func(n *Node) error {
		src := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
		var mu sync.Mutex
		n.seedFn = func() uint64 { mu.Lock(); defer mu.Unlock(); return src.Uint64() }
		return nil
	}
}

// seed returns a seed for one of the node's random sources.
func (n *Node) seed() uint64 {
	if n.seedFn != nil {
		return n.seedFn()
	}
	return rand.Uint64()
}

// New checks cfg and returns a Node. It does no I/O and starts nothing.
func New(cfg Config, opts ...Option) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Node{
		cfg:     cfg,
		log:     slog.New(slog.DiscardHandler),
		reg:     defaultRegistry(),
		now:     time.Now,
		debounc: min(cfg.AnnounceInterval/10, time.Second),
	}
	n.dir = directory.New(directory.WithMegaVerifier(n.verifyMega))
	for _, o := range opts {
		if err := o(n); err != nil {
			return nil, err
		}
	}
	n.base = n.log
	n.log = n.log.With("component", "node")
	n.reach = circuit.NewReach(n.pinnedReach, n.log)
	n.bootstrap, _ = cfg.BootstrapPeers()
	return n, nil
}

// Run starts the node, serves until ctx is done, then closes it.
func (n *Node) Run(ctx context.Context) error {
	if err := n.Start(ctx); err != nil {
		n.Close()
		return err
	}
	<-ctx.Done()
	return n.Close()
}

// Start brings the node up: identity, host, directory, role, API, metrics.
// ctx bounds the start only; Close stops what Start began. On error the
// caller must still call Close.
func (n *Node) Start(ctx context.Context) (err error) {
	n.mu.Lock()
	if n.state != stateNew {
		n.mu.Unlock()
		return errors.New("node: Start called twice or after Close")
	}
	n.state = stateStarted
	runCtx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.httpCtx, n.httpCancel = context.WithCancel(context.Background())
	n.mu.Unlock()

	if n.key == nil {
		if n.key, err = datadir.LoadOrCreateKey(n.cfg.DataDir); err != nil {
			return err
		}
	} else if n.cfg.APIListen != config.APIOff {
		if err := datadir.Ensure(n.cfg.DataDir); err != nil {
			return err
		}
	}
	if n.host, n.rm, err = nodehost.New(n.cfg, n.key, n.gater, &n.relayBudgets); err != nil {
		return err
	}
	n.base = n.base.With("peer", n.host.ID().ShortString())
	n.log = n.log.With("peer", n.host.ID().ShortString())
	if n.m, err = newMetrics(n.reg, n); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if err := n.startReachability(runCtx); err != nil {
		return err
	}
	if n.trust, err = n.newTrust(); err != nil {
		return err
	}
	if n.dirs, err = n.newDirDriver(); err != nil {
		return err
	}
	if err := n.dirs.Join(runCtx); err != nil {
		return err
	}
	if err := n.trust.JoinRevocations(n.dirs.PubSub()); err != nil {
		return err
	}
	n.runCtx = runCtx
	if n.cfg.Role == config.RoleSupernode || n.cfg.Role == config.RoleAuto {
		if err := n.startSupernode(); err != nil {
			return err
		}
		if err := n.loadMegaCert(ctx); err != nil {
			return err
		}
	}
	if n.cfg.Role != config.RoleSupernode {
		// Ordinary and auto nodes are clients; an auto node stays one
		// while it serves (autorole.go).
		if n.client, err = n.newClient(); err != nil {
			return err
		}
		if n.cfg.PartialView() {
			if n.views, err = n.newViewClient(); err != nil {
				return err
			}
		}
		// The groups joined before a restart, resumed where they were.
		groups, err := datadir.LoadGroups(n.cfg.DataDir)
		if err != nil {
			return err
		}
		if err := n.client.RestoreGroups(groups); err != nil {
			return fmt.Errorf("%s: %w", datadir.GroupsFile, err)
		}
	}
	if err := n.startTunnels(); err != nil {
		return err
	}
	if n.cfg.APIListen != config.APIOff {
		if err := n.startAPI(ctx); err != nil {
			return err
		}
	}
	if n.cfg.MetricsListen != "" {
		if err := n.startMetrics(ctx); err != nil {
			return err
		}
	}
	n.started = n.now()
	// The driver expires entries, keeps the bootstrap peers, confirms
	// supernodes (supernode and auto nodes) and rebuilds the ring (every
	// node but one that keeps a partial view, whose view client publishes
	// its ring).
	n.goLoop(func() { n.dirs.Run(runCtx) })
	if n.cfg.PartialView() {
		n.startViewHints()
		n.goLoop(func() { n.views.Run(runCtx) })
	}
	n.goLoop(func() { lan.Run(runCtx, n.lanConfig()) })
	n.goLoop(func() { n.trust.Run(runCtx) })
	if n.cfg.Role == config.RoleSupernode {
		// Announcements and the supernode mesh; an auto node runs them
		// while it serves (autorole.go).
		n.goLoop(func() { n.dirs.Serve(runCtx) })
	}
	if n.cfg.Role == config.RoleAuto {
		if n.roles, err = n.newRoleDriver(); err != nil {
			return err
		}
		n.goLoop(func() { n.roles.Run(runCtx) })
	}
	if n.client != nil {
		n.goLoop(func() { n.client.Run(runCtx) })
		n.goLoop(func() { n.groupStateLoop(runCtx) })
	}
	n.log.Info("started", "id", n.host.ID(), "role", n.cfg.Role, "addrs", n.host.Addrs())
	return nil
}

func (n *Node) goLoop(f func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
}

// Close stops the node gracefully: a supernode announces its departure, then
// every loop stops, then streams, the host, the API and metrics close. It is
// idempotent, safe on a node whose Start failed half-way, and bounded by
// closeTimeout.
func (n *Node) Close() error {
	n.closeMu.Lock()
	defer n.closeMu.Unlock()
	n.mu.Lock()
	if n.state == stateClosed {
		n.mu.Unlock()
		return nil
	}
	started := n.state == stateStarted
	n.state = stateClosed
	cancel := n.cancel
	n.mu.Unlock()
	if !started {
		return nil
	}
	ctx, done := context.WithTimeout(context.Background(), closeTimeout)
	defer done()
	if n.announcer != nil && n.dirs != nil && n.dirs.Joined() && n.serving.Load() && !n.abrupt.Load() {
		n.dirs.AnnounceDeparture(ctx)
	}
	if n.admission != nil {
		if n.abrupt.Load() {
			n.admission.SetOpen(false)
		} else {
			n.admission.Close()
		}
	}
	if n.router != nil {
		n.router.Close()
	}
	var errs []error
	if n.httpCancel != nil {
		n.httpCancel()
	}
	if n.apiSrv != nil {
		errs = append(errs, n.apiSrv.Shutdown(ctx))
		if n.cfg.APIListen != "" {
			localapi.Cleanup(n.cfg.DataDir)
		}
	}
	if n.metricSrv != nil {
		errs = append(errs, n.metricSrv.Shutdown(ctx))
	}
	if n.tunnels != nil {
		n.tunnels.Close()
	}
	cancel()
	n.wg.Wait()
	// The GossipSub router, its topic and subscription stopped with the
	// run context.
	if n.host != nil {
		errs = append(errs, n.host.Close())
	}
	if n.admission != nil {
		n.admission.Close()
	}
	if n.writers != nil {
		n.writers.Close()
	}
	if n.engine != nil {
		n.engine.Close()
	}
	if n.store != nil {
		errs = append(errs, n.store.Close())
	}
	n.log.Info("stopped")
	return errors.Join(errs...)
}

// closeTimeout bounds a graceful Close: the daemon must exit within 5 s of
// SIGTERM.
const closeTimeout = 4 * time.Second

// Host returns the libp2p host (nil before Start).
func (n *Node) Host() host.Host { return n.host }

// ID returns the node's peer ID (empty before Start).
func (n *Node) ID() peer.ID {
	if n.host == nil {
		return ""
	}
	return n.host.ID()
}

// Client returns the node's client side: attach, direct messages, groups,
// listeners. It is nil on a --role supernode node (which relays messages
// but neither sends nor receives them) and before Start.
func (n *Node) Client() *client.Client { return n.client }

// newClient builds the client side on the started host.
func (n *Node) newClient() (*client.Client, error) {
	cfg := client.Config{
		AnnounceInterval: n.cfg.AnnounceInterval,
		RingDebounce:     n.debounc,
		RetryBase:        n.cfg.RetryBase,
		RetryMax:         n.cfg.RetryMax,
		ReturnInterval:   n.cfg.ReturnInterval,
		AckTimeout:       max(2*n.cfg.Keepalive, 500*time.Millisecond),
		Bootstrap:        n.bootstrap,
	}
	opts := append([]client.Option{
		client.WithLogger(n.base),
		client.WithRegisterer(n.reg),
		client.WithClock(n.now),
		client.WithRand(rand.New(rand.NewPCG(n.seed(), n.seed()))),
		client.WithSessionHook(n.circuitAttached),
	}, n.clientOpts...)
	if n.cfg.PartialView() {
		opts = append(opts, client.WithPartialView(n.kickView))
	}
	return client.New(n.host, n.dir, &n.rings, cfg, opts...)
}

// Directory returns the node's supernode directory.
func (n *Node) Directory() *directory.Directory { return n.dir }

// Ring returns the live ring, or nil while the directory has no supernode.
func (n *Node) Ring() *ring.Ring { return n.rings.Load() }

// Role returns the role the node plays now and why.
func (n *Node) Role() (config.Role, string) {
	switch n.cfg.Role {
	case config.RoleAuto:
		r, why := config.RoleOrdinary, "auto: role not evaluated yet"
		if n.serving.Load() {
			r = config.RoleSupernode
		}
		if n.roles != nil {
			why, _ = n.roles.State()
		}
		return r, why
	case config.RoleSupernode:
		return config.RoleSupernode, "pinned by --role supernode"
	}
	return config.RoleOrdinary, "pinned by --role ordinary"
}

func (n *Node) serve(ln net.Listener, h http.Handler) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second,
		// Long requests (listen streams) end when the node closes.
		BaseContext: func(net.Listener) context.Context { return n.httpCtx }}
	n.goLoop(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("http server", "err", err)
		}
	})
	return srv
}

func (n *Node) startMetrics(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", n.cfg.MetricsListen)
	if err != nil {
		return fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{}))
	// Profiles reveal memory contents and cost CPU on demand: they are on
	// the metrics listener only while it is loopback (not
	// --metrics-public), and always behind the local API's
	// authentication (node/api).
	if !n.cfg.MetricsPublic {
		api.ProfileRoutes(mux)
	}
	n.metricSrv, n.metricLn = n.serve(ln, mux), ln.Addr()
	n.log.Info("metrics", "addr", ln.Addr().String())
	return nil
}

// CloseAbruptlyForTest stops the node as a crash would: no departure
// announcement, connections dropped. For tests and the testnet's "kill".
func (n *Node) CloseAbruptlyForTest() error {
	n.abrupt.Store(true)
	return n.Close()
}

// lanConfig is what LAN discovery (package node/lan) needs of the node.
// A node alone gives its join hint after two announce intervals.
func (n *Node) lanConfig() lan.Config {
	return lan.Config{
		Host:      n.host,
		On:        n.cfg.MDNS,
		Bootstrap: len(n.bootstrap) > 0,
		HintAfter: 2 * n.cfg.AnnounceInterval,
		Now:       n.now,
		Log:       n.log,
	}
}
