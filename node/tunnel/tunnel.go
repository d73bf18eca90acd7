package tunnel

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// ServiceName is the resource-manager service of tunnel streams.
const ServiceName = "overlayd.tunnel"

// Config bounds a Manager. Zero fields take the defaults.
type Config struct {
	// Window is the most bytes one side of a connection holds
	// unacknowledged (default 1 MiB): its memory per connection, and the
	// most in flight per direction.
	Window int
	// MaxConnsPerService bounds the open connections of one exposed
	// service, MaxConnsPerConnect those of one connect listener, MaxConns
	// all of them (defaults 64, 64, 256); beyond, BUSY.
	MaxConnsPerService int
	MaxConnsPerConnect int
	MaxConns           int
	// MaxServices and MaxConnects bound the exposed services and the
	// connect listeners (default 64 each).
	MaxServices int
	MaxConnects int
	// IdleTimeout closes a connection that carried no byte either way for
	// that long (default 10 min; negative: never).
	IdleTimeout time.Duration
	// OpenTimeout bounds opening a connection: the stream, the request,
	// the answer and the exposing side's dial of its service (default 10 s).
	OpenTimeout time.Duration
	// MigrateTimeout bounds the connecting side's attempt to move a
	// connection to a direct stream, waiting for hole punching (default
	// 15 s); ResumeGrace is how long the exposing side keeps a connection
	// whose stream failed, waiting for the resume (default 30 s).
	MigrateTimeout time.Duration
	ResumeGrace    time.Duration
	// CutDirectTimeout bounds the direct attempt after the relay cut a
	// connection's circuit (default 1 s): a direct dial that works takes
	// milliseconds, hole punching in progress a round trip or two; past
	// it the connection resumes on a fresh circuit at once (first cut) or
	// fails (second), instead of waiting MigrateTimeout for a direct
	// connection that the paths may never allow.
	CutDirectTimeout time.Duration
}

// Defaults.
const (
	DefaultWindow         = 1 << 20
	DefaultIdleTimeout    = 10 * time.Minute
	DefaultOpenTimeout    = 10 * time.Second
	DefaultMigrateTimeout = 15 * time.Second
	DefaultResumeGrace    = 30 * time.Second
	DefaultCutDirect      = time.Second
	// MinWindow and MaxWindow bound Window.
	MinWindow = 4 * protocol.MaxTunnelData
	MaxWindow = 64 << 20
)

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Window, DefaultWindow)
	c.Window = min(max(c.Window, MinWindow), MaxWindow)
	def(&c.MaxConnsPerService, 64)
	def(&c.MaxConnsPerConnect, 64)
	def(&c.MaxConns, 256)
	def(&c.MaxServices, 64)
	def(&c.MaxConnects, 64)
	defD(&c.IdleTimeout, DefaultIdleTimeout)
	defD(&c.OpenTimeout, DefaultOpenTimeout)
	defD(&c.MigrateTimeout, DefaultMigrateTimeout)
	defD(&c.ResumeGrace, DefaultResumeGrace)
	defD(&c.CutDirectTimeout, DefaultCutDirect)
	return c
}

// Dialer opens tunnel streams to a peer. The node's dialer finds a path
// through the peer's supernode relay when there is no direct one.
type Dialer interface {
	// Open opens a stream of protocol.TunnelID to p on the best path,
	// relayed if need be; when AfterCut(ctx), the direct path was just
	// tried and failed.
	Open(ctx context.Context, p peer.ID) (network.Stream, error)
	// OpenDirect opens a stream to p on a direct (not limited)
	// connection, waiting for hole punching until ctx ends.
	OpenDirect(ctx context.Context, p peer.ID) (network.Stream, error)
}

type afterCutKey struct{}

// WithAfterCut marks a dial for a connection whose relayed circuit was
// just cut and whose direct attempt failed: the dialer should go to the
// relay without trying the peer's direct addresses again.
func WithAfterCut(ctx context.Context) context.Context {
	return context.WithValue(ctx, afterCutKey{}, true)
}

// AfterCut reports whether ctx is a dial after a relay cut whose direct
// attempt just failed (see Dialer.Open).
func AfterCut(ctx context.Context) bool {
	v, _ := ctx.Value(afterCutKey{}).(bool)
	return v
}

// HostDialer is the Dialer of a bare host: streams on the connections the
// host has or can dial from its peerstore.
type HostDialer struct{ H host.Host }

var _ Dialer = HostDialer{}

// Open opens a stream, on a limited (relayed) connection if that is all
// there is.
func (d HostDialer) Open(ctx context.Context, p peer.ID) (network.Stream, error) {
	return d.H.NewStream(network.WithAllowLimitedConn(ctx, "tunnel"), p, protocol.TunnelID)
}

// OpenDirect opens a stream on a direct connection only.
func (d HostDialer) OpenDirect(ctx context.Context, p peer.ID) (network.Stream, error) {
	s, err := d.H.NewStream(ctx, p, protocol.TunnelID)
	if err != nil {
		return nil, err
	}
	if s.Conn().Stat().Limited {
		s.Reset()
		return nil, errors.New("only a relayed connection")
	}
	return s, nil
}

// Option configures a Manager.
type Option func(*Manager) error

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(m *Manager) error {
		if l == nil {
			return errors.New("WithLogger: nil logger")
		}
		m.log = l
		return nil
	}
}

// WithRegisterer registers the metrics on r (default: none registered).
func WithRegisterer(r prometheus.Registerer) Option {
	return func(m *Manager) error {
		if r == nil {
			return errors.New("WithRegisterer: nil registerer")
		}
		m.reg = r
		return nil
	}
}

// WithClock sets the clock of the idle timeout (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(m *Manager) error {
		if now == nil {
			return errors.New("WithClock: nil clock")
		}
		m.now = now
		return nil
	}
}

// WithDialer sets how streams are opened (default HostDialer).
func WithDialer(d Dialer) Option {
	return func(m *Manager) error {
		if d == nil {
			return errors.New("WithDialer: nil dialer")
		}
		m.dial = d
		return nil
	}
}

// counts are the counters of a service or a connect.
type counts struct {
	open        atomic.Int64
	total       atomic.Uint64
	bytesIn     atomic.Uint64
	bytesOut    atomic.Uint64
	refused     atomic.Uint64
	busy        atomic.Uint64
	unavailable atomic.Uint64
	failed      atomic.Uint64
	migrations  atomic.Uint64
	relayCuts   atomic.Uint64
}

// service is an exposed service.
type service struct {
	name, target string
	allow        map[peer.ID]bool
	any          bool
	counts
	conns map[*conn]struct{}
}

// connect is a connect listener.
type connect struct {
	ln      net.Listener
	listen  string
	peer    peer.ID
	service string
	counts
	conns   map[*conn]struct{}
	lastErr atomic.Pointer[string]
	closed  atomic.Bool
}

// Manager holds both sides of a node's tunnels: the services it exposes
// (it serves protocol.TunnelID) and its connect listeners.
type Manager struct {
	h    host.Host
	dial Dialer
	cfg  Config
	log  *slog.Logger
	reg  prometheus.Registerer
	now  func() time.Time
	met  *metrics

	mu       sync.Mutex
	services map[string]*service
	connects map[string]*connect // by listen address
	byID     map[[protocol.TunnelIDLen]byte]*conn
	open     int // connections, both sides
	closed   bool
	wg       sync.WaitGroup
	ctx      context.Context
	cancel   context.CancelFunc
	notify   *network.NotifyBundle
}

// New returns a Manager on h. It starts nothing: Start serves the
// protocol.
func New(h host.Host, cfg Config, opts ...Option) (*Manager, error) {
	if h == nil {
		return nil, errors.New("tunnel: nil host")
	}
	m := &Manager{h: h, cfg: cfg.withDefaults(), log: slog.New(slog.DiscardHandler), now: time.Now,
		services: map[string]*service{}, connects: map[string]*connect{}, byID: map[[protocol.TunnelIDLen]byte]*conn{}}
	m.dial = HostDialer{H: h}
	for _, o := range opts {
		if err := o(m); err != nil {
			return nil, err
		}
	}
	m.log = m.log.With("component", "tunnel")
	var err error
	if m.met, err = newMetrics(m.reg, m); err != nil {
		return nil, err
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m, nil
}

// Start serves protocol.TunnelID, moves relayed connections to a direct
// connection as soon as one appears, and sweeps idle connections.
func (m *Manager) Start() {
	m.h.SetStreamHandler(protocol.TunnelID, m.handle)
	m.h.Network().Notify(m.notifiee())
	if m.cfg.IdleTimeout > 0 {
		m.goConn(func() {
			t := time.NewTicker(max(m.cfg.IdleTimeout/8, 50*time.Millisecond))
			defer t.Stop()
			for {
				select {
				case <-m.ctx.Done():
					return
				case <-t.C:
					m.SweepIdle()
				}
			}
		})
	}
}

// Close stops serving, closes every listener and connection and waits for
// the goroutines. Idempotent.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	var conns []*conn
	for _, c := range m.byID {
		conns = append(conns, c)
	}
	var lns []*connect
	for _, c := range m.connects {
		lns = append(lns, c)
		for cn := range c.conns {
			conns = append(conns, cn)
		}
	}
	m.mu.Unlock()
	m.h.RemoveStreamHandler(protocol.TunnelID)
	m.h.Network().StopNotify(m.notifiee())
	m.cancel()
	for _, c := range lns {
		c.closed.Store(true)
		_ = c.ln.Close()
	}
	// In parallel: each abort may wait up to its reset's write deadline.
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.abort(errors.New("tunnels closed"), true)
		}()
	}
	wg.Wait()
	m.wg.Wait()
}

// goConn runs f on a goroutine the Manager waits for on Close.
func (m *Manager) goConn(f func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
}

// Expose makes target (host:port) reachable as name by the peers in
// allow, or by every peer with any.
func (m *Manager) Expose(name, target string, allow []peer.ID, anyPeer bool) (localapi.ExposedService, error) {
	if err := protocol.ValidServiceName(name); err != nil {
		return localapi.ExposedService{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if anyPeer == (len(allow) > 0) {
		return localapi.ExposedService{}, fmt.Errorf("%w: give the peers allowed (--allow) or allow any peer (--allow-any), exactly one", ErrInvalid)
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		return localapi.ExposedService{}, fmt.Errorf("%w: target %q: %v", ErrInvalid, target, err)
	}
	svc := &service{name: name, target: target, any: anyPeer, allow: map[peer.ID]bool{}, conns: map[*conn]struct{}{}}
	for _, p := range allow {
		svc.allow[p] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return localapi.ExposedService{}, ErrClosed
	}
	if _, ok := m.services[name]; ok {
		return localapi.ExposedService{}, fmt.Errorf("%w: service %q is exposed already (unexpose it first)", ErrExists, name)
	}
	if len(m.services) >= m.cfg.MaxServices {
		return localapi.ExposedService{}, fmt.Errorf("%w: %d services exposed, the limit", ErrLimit, m.cfg.MaxServices)
	}
	m.services[name] = svc
	m.log.Info("service exposed", "name", name, "target", target, "allow", len(allow), "any", anyPeer)
	return svc.infoLocked(), nil
}

// Unexpose stops exposing name and closes its open connections.
func (m *Manager) Unexpose(name string) error {
	m.mu.Lock()
	svc, ok := m.services[name]
	delete(m.services, name)
	var conns []*conn
	if ok {
		conns = slices.Collect(maps.Keys(svc.conns))
	}
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: no service %q is exposed", ErrNotFound, name)
	}
	for _, c := range conns {
		c.abort(errors.New("service unexposed"), true)
	}
	m.log.Info("service unexposed", "name", name)
	return nil
}

// Connect opens a listener on listen (host:port) whose connections are
// carried to service on p. It returns the listener's description, with
// the address it listens on.
func (m *Manager) Connect(ctx context.Context, p peer.ID, svcName, listen string) (localapi.TunnelConnect, error) {
	if err := protocol.ValidServiceName(svcName); err != nil {
		return localapi.TunnelConnect{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if p == m.h.ID() {
		return localapi.TunnelConnect{}, fmt.Errorf("%w: cannot connect to a service of this node", ErrInvalid)
	}
	m.mu.Lock()
	full := len(m.connects) >= m.cfg.MaxConnects
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return localapi.TunnelConnect{}, ErrClosed
	}
	if full {
		return localapi.TunnelConnect{}, fmt.Errorf("%w: %d connect listeners, the limit", ErrLimit, m.cfg.MaxConnects)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", listen)
	if err != nil {
		return localapi.TunnelConnect{}, fmt.Errorf("listen on %s: %w", listen, err)
	}
	c := &connect{ln: ln, listen: ln.Addr().String(), peer: p, service: svcName, conns: map[*conn]struct{}{}}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		_ = ln.Close()
		return localapi.TunnelConnect{}, ErrClosed
	}
	m.connects[c.listen] = c
	info := c.infoLocked()
	m.mu.Unlock()
	m.goConn(func() { m.acceptLoop(c) })
	m.log.Info("connect listening", "listen", c.listen, "remote", p.ShortString(), "service", svcName)
	return info, nil
}

// Disconnect closes the connect listener on listen and its connections.
func (m *Manager) Disconnect(listen string) error {
	m.mu.Lock()
	c, ok := m.connects[listen]
	delete(m.connects, listen)
	var conns []*conn
	if ok {
		conns = slices.Collect(maps.Keys(c.conns))
	}
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: no connect listens on %s", ErrNotFound, listen)
	}
	c.closed.Store(true)
	_ = c.ln.Close()
	for _, cn := range conns {
		cn.abort(errors.New("disconnected"), true)
	}
	m.log.Info("connect closed", "listen", listen)
	return nil
}

// List describes both sides.
func (m *Manager) List() localapi.Tunnels {
	m.mu.Lock()
	out := localapi.Tunnels{Window: m.cfg.Window, Exposed: []localapi.ExposedService{}, Connects: []localapi.TunnelConnect{}}
	var svcs []*service
	for _, s := range m.services {
		svcs = append(svcs, s)
	}
	var cs []*connect
	for _, c := range m.connects {
		cs = append(cs, c)
	}
	type pending struct {
		conns []*conn
		dst   *[]localapi.TunnelConn
	}
	var ps []pending
	for _, s := range svcs {
		out.Exposed = append(out.Exposed, s.infoLocked())
	}
	for _, c := range cs {
		out.Connects = append(out.Connects, c.infoLocked())
	}
	for i, s := range svcs {
		ps = append(ps, pending{conns: keys(s.conns), dst: &out.Exposed[i].Conns})
	}
	for i, c := range cs {
		ps = append(ps, pending{conns: keys(c.conns), dst: &out.Connects[i].Conns})
	}
	m.mu.Unlock()
	// Each connection locks itself: not under m.mu.
	for _, p := range ps {
		for _, c := range p.conns {
			*p.dst = append(*p.dst, c.info())
		}
		sort.Slice(*p.dst, func(i, j int) bool { return (*p.dst)[i].Since.Before((*p.dst)[j].Since) })
	}
	sort.Slice(out.Exposed, func(i, j int) bool { return out.Exposed[i].Name < out.Exposed[j].Name })
	sort.Slice(out.Connects, func(i, j int) bool { return out.Connects[i].Listen < out.Connects[j].Listen })
	return out
}

func keys(m map[*conn]struct{}) []*conn {
	out := make([]*conn, 0, len(m))
	for c := range m {
		out = append(out, c)
	}
	return out
}

func (s *service) infoLocked() localapi.ExposedService {
	out := localapi.ExposedService{Name: s.name, Target: s.target, AllowAny: s.any,
		Open: int(s.open.Load()), Total: s.total.Load(), BytesIn: s.bytesIn.Load(), BytesOut: s.bytesOut.Load(),
		Refused: s.refused.Load(), Busy: s.busy.Load(), Unavailable: s.unavailable.Load()}
	for p := range s.allow {
		out.Allow = append(out.Allow, p.String())
	}
	slices.Sort(out.Allow)
	return out
}

func (c *connect) infoLocked() localapi.TunnelConnect {
	out := localapi.TunnelConnect{Listen: c.listen, Peer: c.peer.String(), Service: c.service,
		Open: int(c.open.Load()), Total: c.total.Load(), BytesIn: c.bytesIn.Load(), BytesOut: c.bytesOut.Load(),
		Failed: c.failed.Load(), Migrations: c.migrations.Load(), RelayCuts: c.relayCuts.Load()}
	if e := c.lastErr.Load(); e != nil {
		out.LastError = *e
	}
	return out
}

func (c *connect) fail(err error) {
	s := err.Error()
	c.lastErr.Store(&s)
}

// SweepIdle closes the connections idle for longer than the idle timeout
// (Start runs it periodically; tests call it with their clock).
func (m *Manager) SweepIdle() {
	if m.cfg.IdleTimeout <= 0 {
		return
	}
	now := m.now()
	m.mu.Lock()
	var all []*conn
	for _, c := range m.byID {
		all = append(all, c)
	}
	for _, c := range m.connects {
		all = append(all, keys(c.conns)...)
	}
	m.mu.Unlock()
	for _, c := range all {
		c.mu.Lock()
		idle := now.Sub(c.lastActive)
		c.mu.Unlock()
		if idle > m.cfg.IdleTimeout {
			m.met.idle.Inc()
			c.abort(fmt.Errorf("idle for %v (idle timeout %v)", idle.Round(time.Second), m.cfg.IdleTimeout), true)
		}
	}
}

// acceptLoop carries each connection accepted on c's listener.
func (m *Manager) acceptLoop(c *connect) {
	for {
		tcp, err := c.ln.Accept()
		if err != nil {
			if !c.closed.Load() {
				m.log.Warn("connect listener failed", "listen", c.listen, "err", err)
				c.fail(err)
			}
			return
		}
		if !m.reserve(func() bool { return c.open.Load() < int64(m.cfg.MaxConnsPerConnect) }, &c.open) {
			c.failed.Add(1)
			m.met.refused.WithLabelValues("busy").Inc()
			c.fail(fmt.Errorf("at the connection limit (%d per connect, %d in all)", m.cfg.MaxConnsPerConnect, m.cfg.MaxConns))
			_ = tcp.Close()
			continue
		}
		m.goConn(func() { m.openConn(c, tcp) })
	}
}

// reserve takes a connection slot if the owner's bound (ok) and the total
// allow it, adding one to open.
func (m *Manager) reserve(ok func() bool, open *atomic.Int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.open >= m.cfg.MaxConns || !ok() {
		return false
	}
	m.open++
	open.Add(1)
	return true
}

func (m *Manager) release(open *atomic.Int64) {
	m.mu.Lock()
	m.open--
	m.mu.Unlock()
	open.Add(-1)
}

// openConn opens the tunnel of one accepted connection.
func (m *Manager) openConn(c *connect, tcp net.Conn) {
	var id [protocol.TunnelIDLen]byte
	_, _ = rand.Read(id[:])
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.OpenTimeout)
	defer cancel()
	s, resp, err := m.openStream(ctx, m.dial.Open, c.peer, &pb.TunnelOpen{Service: c.service, TunnelId: id[:]})
	if err == nil && resp.GetStatus() != pb.TunnelStatus_TUNNEL_OK {
		err = &RefusedError{Status: resp.GetStatus(), Detail: resp.GetDetail()}
		s.Reset()
	}
	if err != nil {
		m.release(&c.open)
		c.failed.Add(1)
		m.met.failed.Inc()
		c.fail(fmt.Errorf("open %s/%s: %w", c.peer, c.service, err))
		m.log.Info("tunnel connection not opened", "remote", c.peer.ShortString(), "service", c.service, "err", err)
		_ = tcp.Close()
		return
	}
	cn := newConn(m, id, c.peer, tcp, true, &c.counts, c.conns, c.service)
	cn.cc = c
	m.mu.Lock()
	if c.closed.Load() || m.closed {
		m.mu.Unlock()
		s.Reset()
		m.release(&c.open)
		_ = tcp.Close()
		return
	}
	c.conns[cn] = struct{}{}
	m.mu.Unlock()
	c.total.Add(1)
	m.met.opened.WithLabelValues("connect").Inc()
	if err := cn.attach(s, 0); err != nil {
		cn.abort(err, false)
		return
	}
	m.log.Debug("tunnel connection opened", "id", cn.idString(), "remote", c.peer.ShortString(), "service", c.service, "path", pathOf(s.Conn().Stat().Limited))
	cn.tcpLoop()
}

// openStream opens a stream with open, sends req and reads the answer.
func (m *Manager) openStream(ctx context.Context, open func(context.Context, peer.ID) (network.Stream, error), p peer.ID, req *pb.TunnelOpen) (network.Stream, *pb.TunnelOpenResponse, error) {
	s, err := open(ctx, p)
	if err != nil {
		return nil, nil, fmt.Errorf("open stream: %w", err)
	}
	if err := s.Scope().SetService(ServiceName); err != nil {
		s.Reset()
		return nil, nil, fmt.Errorf("open stream: %w", err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	if err := protocol.WriteFrame(s, req); err != nil {
		s.Reset()
		return nil, nil, fmt.Errorf("send request: %w", err)
	}
	var resp pb.TunnelOpenResponse
	if err := readOpen(s, &resp); err != nil {
		s.Reset()
		return nil, nil, fmt.Errorf("read answer: %w", err)
	}
	_ = s.SetDeadline(time.Time{})
	return s, &resp, nil
}

// handle serves one tunnel stream: a new connection or a resume.
func (m *Manager) handle(s network.Stream) {
	if err := s.Scope().SetService(ServiceName); err != nil {
		s.Reset()
		return
	}
	if err := s.Scope().ReserveMemory(protocol.MaxTunnelFrame, network.ReservationPriorityAlways); err != nil {
		m.met.refused.WithLabelValues("resources").Inc()
		s.Reset()
		return
	}
	_ = s.SetDeadline(time.Now().Add(m.cfg.OpenTimeout))
	remote := s.Conn().RemotePeer()
	var req pb.TunnelOpen
	err := readOpen(s, &req)
	if err == nil {
		err = protocol.CheckTunnelOpen(&req)
	}
	if err != nil {
		if protocol.ReasonOf(err) != "" {
			m.met.rejected.Inc()
			m.answer(s, pb.TunnelStatus_TUNNEL_BAD_REQUEST, protocol.ShortDetail(err.Error()), 0)
			return
		}
		s.Reset()
		return
	}
	var id [protocol.TunnelIDLen]byte
	copy(id[:], req.GetTunnelId())
	if req.GetResume() {
		m.handleResume(s, remote, id, &req)
		return
	}
	m.mu.Lock()
	svc := m.services[req.GetService()]
	_, dup := m.byID[id]
	m.mu.Unlock()
	switch {
	case svc == nil:
		m.met.refused.WithLabelValues("no_such_service").Inc()
		m.answer(s, pb.TunnelStatus_TUNNEL_NO_SUCH_SERVICE, fmt.Sprintf("no service %q here", req.GetService()), 0)
		return
	case !svc.any && !svc.allow[remote]:
		// Checked on the authenticated peer, before anything is dialled.
		svc.refused.Add(1)
		m.met.refused.WithLabelValues("not_allowed").Inc()
		m.log.Info("tunnel refused: peer not allowed", "service", svc.name, "remote", remote)
		m.answer(s, pb.TunnelStatus_TUNNEL_REFUSED, fmt.Sprintf("peer %s is not allowed to use %q", remote, svc.name), 0)
		return
	case dup:
		m.met.rejected.Inc()
		m.answer(s, pb.TunnelStatus_TUNNEL_BAD_REQUEST, "tunnel id in use", 0)
		return
	}
	if !m.reserve(func() bool { return svc.open.Load() < int64(m.cfg.MaxConnsPerService) }, &svc.open) {
		svc.busy.Add(1)
		m.met.refused.WithLabelValues("busy").Inc()
		m.answer(s, pb.TunnelStatus_TUNNEL_BUSY, fmt.Sprintf("service %q is at its connection limit (%d, %d in all)", svc.name, m.cfg.MaxConnsPerService, m.cfg.MaxConns), 0)
		return
	}
	d := net.Dialer{Timeout: m.cfg.OpenTimeout}
	tcp, err := d.DialContext(m.ctx, "tcp", svc.target)
	if err != nil {
		m.release(&svc.open)
		svc.unavailable.Add(1)
		m.met.refused.WithLabelValues("unavailable").Inc()
		m.answer(s, pb.TunnelStatus_TUNNEL_UNAVAILABLE, fmt.Sprintf("service %q: %v", svc.name, err), 0)
		return
	}
	cn := newConn(m, id, remote, tcp, false, &svc.counts, svc.conns, svc.name)
	m.mu.Lock()
	if m.closed || m.services[svc.name] != svc {
		m.mu.Unlock()
		m.release(&svc.open)
		_ = tcp.Close()
		m.answer(s, pb.TunnelStatus_TUNNEL_NO_SUCH_SERVICE, fmt.Sprintf("no service %q here", svc.name), 0)
		return
	}
	if _, dup := m.byID[id]; dup {
		m.mu.Unlock()
		m.release(&svc.open)
		_ = tcp.Close()
		m.answer(s, pb.TunnelStatus_TUNNEL_BAD_REQUEST, "tunnel id in use", 0)
		return
	}
	m.byID[id] = cn
	svc.conns[cn] = struct{}{}
	m.mu.Unlock()
	svc.total.Add(1)
	m.met.opened.WithLabelValues("expose").Inc()
	if err := protocol.WriteFrame(s, &pb.TunnelOpenResponse{Status: pb.TunnelStatus_TUNNEL_OK}); err != nil {
		s.Reset()
		cn.abort(fmt.Errorf("answer: %w", err), false)
		return
	}
	_ = s.SetDeadline(time.Time{})
	if err := cn.attach(s, 0); err != nil {
		cn.abort(err, false)
		return
	}
	m.log.Debug("tunnel connection accepted", "id", cn.idString(), "remote", remote.ShortString(), "service", svc.name, "path", pathOf(s.Conn().Stat().Limited))
	m.goConn(cn.tcpLoop)
}

// answer sends a refusal and closes the stream.
func (m *Manager) answer(s network.Stream, st pb.TunnelStatus, detail string, received uint64) {
	_ = protocol.WriteFrame(s, &pb.TunnelOpenResponse{Status: st, Detail: protocol.ShortDetail(detail), Received: received})
	_ = s.Close()
}

// handleResume moves a connection of the asking peer to stream s.
func (m *Manager) handleResume(s network.Stream, remote peer.ID, id [protocol.TunnelIDLen]byte, req *pb.TunnelOpen) {
	m.mu.Lock()
	cn := m.byID[id]
	m.mu.Unlock()
	if cn == nil || cn.peer != remote {
		// Another peer's tunnel ID is answered as an unknown one.
		m.met.refused.WithLabelValues("no_such_tunnel").Inc()
		m.answer(s, pb.TunnelStatus_TUNNEL_NO_SUCH_TUNNEL, "no such tunnel connection", 0)
		return
	}
	if err := cn.canResume(req.GetReceived()); err != nil {
		m.met.rejected.Inc()
		m.answer(s, pb.TunnelStatus_TUNNEL_BAD_REQUEST, protocol.ShortDetail(err.Error()), 0)
		return
	}
	cn.mu.Lock()
	recv := cn.ackValueLocked()
	cn.mu.Unlock()
	if err := protocol.WriteFrame(s, &pb.TunnelOpenResponse{Status: pb.TunnelStatus_TUNNEL_OK, Received: recv}); err != nil {
		s.Reset()
		return
	}
	_ = s.SetDeadline(time.Time{})
	if err := cn.attach(s, req.GetReceived()); err != nil {
		cn.abort(fmt.Errorf("resume: %w", err), false)
	}
}

// awaitResume closes cn unless a resume attaches a new stream within the
// grace.
func (m *Manager) awaitResume(cn *conn, g int) {
	t := time.AfterFunc(m.cfg.ResumeGrace, func() {
		cn.mu.Lock()
		still := cn.gen == g && cn.broken
		cn.mu.Unlock()
		if still {
			cn.abort(fmt.Errorf("stream lost and not resumed within %v", m.cfg.ResumeGrace), false)
		}
	})
	m.goConn(func() {
		select {
		case <-m.ctx.Done():
			t.Stop()
		case <-cn.doneOrMoved(g):
			t.Stop()
		}
	})
}

// doneOrMoved is closed when cn ends or leaves stream generation g.
func (c *conn) doneOrMoved(g int) <-chan struct{} {
	ch := make(chan struct{})
	c.m.goConn(func() {
		c.mu.Lock()
		for !c.done && c.gen == g {
			c.cond.Wait()
		}
		c.mu.Unlock()
		close(ch)
	})
	return ch
}

// recoverConn moves a connecting-side connection to a direct stream: after
// its stream failed (cause) or, with cause nil, because a direct connection
// appeared while it was relayed.
func (m *Manager) recoverConn(c *conn, cause error) {
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.MigrateTimeout)
	defer cancel()
	c.mu.Lock()
	wasLimited := c.limited
	c.mu.Unlock()
	resume := func(open func(context.Context, peer.ID) (network.Stream, error), within time.Duration) error {
		octx, ocancel := context.WithTimeout(ctx, within)
		defer ocancel()
		c.mu.Lock()
		recv := c.ackValueLocked()
		c.mu.Unlock()
		s, resp, err := m.openStream(octx, open, c.peer, &pb.TunnelOpen{Service: c.service, TunnelId: c.id[:], Resume: true, Received: recv})
		if err == nil && resp.GetStatus() != pb.TunnelStatus_TUNNEL_OK {
			err = &RefusedError{Status: resp.GetStatus(), Detail: resp.GetDetail()}
			s.Reset()
		}
		if err == nil {
			err = c.attach(s, resp.GetReceived())
		}
		return err
	}
	c.mu.Lock()
	last := c.recircuited
	c.mu.Unlock()
	// After a relay cut the direct attempt is short (CutDirectTimeout):
	// the connection is stalled meanwhile, and a fresh circuit (or a clear
	// failure) is better than waiting for a direct path that may never
	// come. Hole punching on the fresh circuit still moves it (migrateTo).
	direct := m.cfg.MigrateTimeout
	if cause != nil && wasLimited {
		direct = min(direct, m.cfg.CutDirectTimeout)
	}
	dctx, dcancel := context.WithTimeout(ctx, direct)
	defer dcancel()
	var err error
	for {
		if err = resume(m.dial.OpenDirect, direct); err == nil {
			return
		}
		c.mu.Lock()
		broken := c.broken
		c.mu.Unlock()
		// Once the connection had its second circuit, wait for hole
		// punching in progress until the direct attempt's deadline.
		if !broken || !last || !wasLimited {
			break
		}
		select {
		case <-dctx.Done():
		case <-time.After(250 * time.Millisecond):
			continue
		}
		break
	}
	c.mu.Lock()
	broken, again := c.broken, !c.recircuited && wasLimited && c.broken
	if again {
		c.recircuited = true
	}
	c.mu.Unlock()
	if !broken {
		// A migration attempt while the relayed stream still works: keep
		// it; the next direct connection tries again.
		c.mu.Lock()
		c.recovering = false
		c.mu.Unlock()
		m.log.Debug("tunnel connection stays relayed", "id", c.idString(), "err", err)
		return
	}
	if again {
		// The relay cut the circuit before hole punching made a direct
		// connection (a fast transfer spends 128 KiB in milliseconds):
		// once per connection, a fresh circuit gives hole punching
		// another chance; the relay's budget holds per circuit.
		rerr := resume(func(ctx context.Context, p peer.ID) (network.Stream, error) {
			return m.dial.Open(WithAfterCut(ctx), p)
		}, m.cfg.OpenTimeout)
		if rerr == nil {
			m.log.Info("tunnel connection resumed on a new relayed circuit", "id", c.idString(), "remote", c.peer.ShortString())
			return
		}
		err = fmt.Errorf("%v; again through the relay: %v", err, rerr)
	}
	c.mu.Lock()
	c.recovering = false
	sent, recvd, brokenAt := c.sent, c.recv, c.brokenAt
	relayedAt, relayedOut, relayedIn := c.relayedAt, c.relayedOut, c.relayedIn
	c.mu.Unlock()
	var why error
	if wasLimited {
		m.met.relayCuts.Inc()
		c.owner.relayCuts.Add(1)
		why = fmt.Errorf("%w after %v, %d bytes sent and %d received on it (the relay's circuit limit; overlayd supernodes default to %s) and no direct connection could be made: %v (stream: %v)",
			ErrRelayCut, brokenAt.Sub(relayedAt).Round(time.Millisecond), sent-relayedOut, recvd-relayedIn, RelayLimitText, err, cause)
	} else {
		why = fmt.Errorf("stream lost (%v) and not resumed: %v", cause, err)
	}
	m.log.Warn("tunnel connection cut", "id", c.idString(), "remote", c.peer.ShortString(), "err", why)
	c.abort(why, false)
}

// RelayLimitText names the relay's default circuit limit, for messages.
const RelayLimitText = "128 KiB per direction and 2 min per circuit"

// connEnded removes an ended connection and releases its slot.
func (m *Manager) connEnded(c *conn, err error) {
	m.mu.Lock()
	if m.byID[c.id] == c {
		delete(m.byID, c.id)
	}
	delete(c.set, c)
	m.open--
	m.mu.Unlock()
	c.owner.open.Add(-1)
	m.met.closed.Inc()
	if err != nil {
		m.log.Debug("tunnel connection closed", "id", c.idString(), "err", err)
	}
}

// notifiee moves relayed connections to a direct connection once one
// appears to their peer.
func (m *Manager) notifiee() network.Notifiee {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.notify == nil {
		m.notify = &network.NotifyBundle{ConnectedF: func(_ network.Network, nc network.Conn) {
			if nc.Stat().Limited {
				return
			}
			m.migrateTo(nc.RemotePeer())
		}}
	}
	return m.notify
}

// migrateTo starts moving the relayed connecting-side connections to p.
func (m *Manager) migrateTo(p peer.ID) {
	m.mu.Lock()
	var cs []*conn
	for _, c := range m.connects {
		if c.peer != p {
			continue
		}
		cs = append(cs, keys(c.conns)...)
	}
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return
	}
	for _, c := range cs {
		c.mu.Lock()
		start := !c.done && c.limited && !c.recovering && c.s != nil
		if start {
			c.recovering = true
		}
		c.mu.Unlock()
		if start {
			m.goConn(func() { m.recoverConn(c, nil) })
		}
	}
}
