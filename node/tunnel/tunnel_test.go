package tunnel

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/localapi"
)

// testDeadline bounds every wait of these tests: generous, for a loaded
// 2-core machine.
const testDeadline = 30 * time.Second

func newHost(t testing.TB) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func connectHosts(t testing.TB, a, b host.Host) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	if err := a.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

func newManager(t testing.TB, h host.Host, cfg Config, opts ...Option) *Manager {
	t.Helper()
	m, err := New(h, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	m.Start()
	t.Cleanup(m.Close)
	return m
}

// pair is an exposing and a connecting Manager on connected hosts.
type pair struct {
	ha, hb host.Host
	a, b   *Manager // a exposes, b connects
}

func newPair(t testing.TB, cfg Config, bopts ...Option) pair {
	t.Helper()
	ha, hb := newHost(t), newHost(t)
	connectHosts(t, hb, ha)
	return pair{ha: ha, hb: hb, a: newManager(t, ha, cfg), b: newManager(t, hb, cfg, bopts...)}
}

// listen starts a TCP listener on loopback, closed at the end of the test.
func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// echoServer echoes every connection accepted on ln.
func echoServer(t testing.TB, ln net.Listener) {
	t.Helper()
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(func() { _ = ln.Close() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
}

// expose exposes target on p.a to p.b and connects p.b to it.
func (p pair) expose(t testing.TB, target string) localapi.TunnelConnect {
	t.Helper()
	if _, err := p.a.Expose("svc", target, []peer.ID{p.hb.ID()}, false); err != nil {
		t.Fatal(err)
	}
	tc, err := p.b.Connect(context.Background(), p.ha.ID(), "svc", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

func dial(t testing.TB, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.(*net.TCPConn)
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// waitFor polls cond (cheap, in-process state) until it holds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, testDeadline)
		}
		time.Sleep(5 * time.Millisecond) // polling counters of the system under test
	}
}

// echoThrough writes data through c from one goroutine and reads the echo
// from this one; after each chunk read, each is called with the total.
func echoThrough(t testing.TB, c *net.TCPConn, data []byte, each func(int)) []byte {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.CloseWrite()
		}
		errc <- err
	}()
	_ = c.SetReadDeadline(time.Now().Add(testDeadline))
	var got bytes.Buffer
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		got.Write(buf[:n])
		if each != nil && n > 0 {
			each(got.Len())
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("read after %d bytes: %v", got.Len(), err)
			}
			break
		}
	}
	if err := <-errc; err != nil {
		t.Errorf("write: %v", err)
	}
	return got.Bytes()
}

func TestTunnelEchoByteIdentical(t *testing.T) {
	p := newPair(t, Config{Window: 256 << 10})
	ln := listen(t)
	echoServer(t, ln)
	tc := p.expose(t, ln.Addr().String())
	data := randomBytes(6 << 20)
	got := echoThrough(t, dial(t, tc.Listen), data, nil)
	if !bytes.Equal(got, data) {
		t.Fatalf("echo differs: %d bytes back of %d", len(got), len(data))
	}
	waitFor(t, "both sides close the connection", func() bool { return p.a.List().Exposed[0].Open == 0 && p.b.List().Connects[0].Open == 0 })
	l := p.b.List().Connects[0]
	if l.BytesOut != uint64(len(data)) || l.BytesIn != uint64(len(data)) || l.Total != 1 {
		t.Fatalf("connect counters: %+v", l)
	}
}

func TestTunnelHTTPByteIdentical(t *testing.T) {
	p := newPair(t, Config{})
	body := randomBytes(5 << 20)
	ln := listen(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) })}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	tc := p.expose(t, ln.Addr().String())
	hc := &http.Client{Timeout: testDeadline}
	for i := range 3 { // keep-alive reuses one tunnel connection, then a new one
		resp, err := hc.Get("http://" + tc.Listen + "/file")
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || sha256.Sum256(got) != sha256.Sum256(body) {
			t.Fatalf("GET %d: %d bytes, err %v: not the file", i, len(got), err)
		}
	}
}

func TestTunnelRefusedBeforeAnyByte(t *testing.T) {
	ha, hb, hc := newHost(t), newHost(t), newHost(t)
	connectHosts(t, hb, ha)
	connectHosts(t, hc, ha)
	a, c := newManager(t, ha, Config{}), newManager(t, hc, Config{})
	ln := listen(t).(*net.TCPListener)
	if _, err := a.Expose("svc", ln.Addr().String(), []peer.ID{hb.ID()}, false); err != nil {
		t.Fatal(err)
	}
	tc, err := c.Connect(context.Background(), ha.ID(), "svc", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cc := dial(t, tc.Listen)
	_, _ = cc.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	_ = cc.SetReadDeadline(time.Now().Add(testDeadline))
	if n, err := cc.Read(make([]byte, 16)); n != 0 || err == nil {
		t.Fatalf("a refused connection read %d bytes, %v", n, err)
	}
	waitFor(t, "the refusal is counted", func() bool { return a.List().Exposed[0].Refused == 1 })
	l := c.List().Connects[0]
	if l.Failed != 1 || !strings.Contains(l.LastError, "allow-list") {
		t.Fatalf("the connecting side does not say why: %+v", l)
	}
	// The service's listener saw no connection at all.
	_ = ln.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if s, err := ln.Accept(); err == nil {
		s.Close()
		t.Fatal("the refused peer's connection reached the service")
	}
}

func TestTunnelHalfClose(t *testing.T) {
	p := newPair(t, Config{})
	ln := listen(t)
	got := make(chan string, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer s.Close()
		_ = s.SetDeadline(time.Now().Add(testDeadline))
		b, err := io.ReadAll(s) // ends at the client's FIN
		if err != nil {
			got <- err.Error()
			return
		}
		_, _ = s.Write([]byte("answer to " + string(b)))
		got <- string(b)
	}()
	tc := p.expose(t, ln.Addr().String())
	c := dial(t, tc.Listen)
	_, _ = c.Write([]byte("question"))
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(testDeadline))
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "answer to question" {
		t.Fatalf("read %q, %v", b, err)
	}
	if s := <-got; s != "question" {
		t.Fatalf("the service read %q", s)
	}
}

func TestTunnelIdleTimeout(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := WithClock(func() time.Time { return time.Unix(0, now.Load()) })
	cfg := Config{IdleTimeout: time.Hour} // the ticker never fires in the test
	ha, hb := newHost(t), newHost(t)
	connectHosts(t, hb, ha)
	a, b := newManager(t, ha, cfg, clock), newManager(t, hb, cfg, clock)
	ln := listen(t)
	echoServer(t, ln)
	if _, err := a.Expose("svc", ln.Addr().String(), nil, true); err != nil {
		t.Fatal(err)
	}
	tc, err := b.Connect(context.Background(), ha.ID(), "svc", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, tc.Listen)
	_ = c.SetReadDeadline(time.Now().Add(testDeadline))
	_, _ = c.Write([]byte("x"))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	now.Add(int64(59 * time.Minute))
	a.SweepIdle()
	b.SweepIdle()
	if b.List().Connects[0].Open != 1 {
		t.Fatal("closed before the idle timeout")
	}
	now.Add(int64(2 * time.Minute))
	b.SweepIdle()
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes after the idle timeout", n)
	}
	waitFor(t, "both sides close the idle connection", func() bool { return a.List().Exposed[0].Open == 0 && b.List().Connects[0].Open == 0 })
	if l := b.List().Connects[0]; !strings.Contains(l.LastError, "idle") {
		t.Fatalf("last error %q does not name the idle timeout", l.LastError)
	}
}

// TestTunnelSlowConsumerBounded: the service reads nothing for a while;
// the writer fills the window and stops, each side holds at most the
// window, and every byte arrives once the service reads again.
func TestTunnelSlowConsumerBounded(t *testing.T) {
	const window = 128 << 10
	p := newPair(t, Config{Window: window})
	ln := listen(t)
	gate := make(chan struct{})
	sum := make(chan [32]byte, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		<-gate
		h := sha256.New()
		_, _ = io.Copy(h, s)
		sum <- [32]byte(h.Sum(nil))
	}()
	tc := p.expose(t, ln.Addr().String())
	c := dial(t, tc.Listen)
	data := randomBytes(32 << 20)
	var written atomic.Int64
	werr := make(chan error, 1)
	go func() {
		for off := 0; off < len(data); off += 16 << 10 {
			if _, err := c.Write(data[off : off+16<<10]); err != nil {
				werr <- err
				return
			}
			written.Add(16 << 10)
		}
		werr <- c.CloseWrite()
	}()
	// The connecting side's window fills and stays full: the writer is
	// held back.
	waitFor(t, "the connecting side's window fills", func() bool {
		cs := p.b.List().Connects[0].Conns
		return len(cs) == 1 && cs[0].Buffered == window
	})
	if w := written.Load(); w >= int64(len(data)) {
		t.Fatalf("the writer wrote all %d bytes while the service read nothing", w)
	}
	close(gate)
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-sum:
		if s != sha256.Sum256(data) {
			t.Fatal("the service received other bytes")
		}
	case <-time.After(testDeadline):
		t.Fatal("the service did not receive everything")
	}
	for side, conns := range map[string][]localapi.TunnelConn{"connect": p.b.List().Connects[0].Conns, "expose": p.a.List().Exposed[0].Conns} {
		for _, cn := range conns {
			if cn.MaxBuffered > window {
				t.Errorf("%s side held %d bytes, window %d", side, cn.MaxBuffered, window)
			}
		}
	}
}

// cutStream resets the current stream of b's only connection.
func cutStream(t testing.TB, b *Manager) {
	t.Helper()
	b.mu.Lock()
	var cn *conn
	for _, c := range b.connects {
		for x := range c.conns {
			cn = x
		}
	}
	b.mu.Unlock()
	if cn == nil {
		t.Fatal("no connection to cut")
	}
	cn.mu.Lock()
	s := cn.s
	cn.mu.Unlock()
	s.Reset()
}

func TestTunnelMigrationAfterCut(t *testing.T) {
	p := newPair(t, Config{Window: 256 << 10})
	ln := listen(t)
	echoServer(t, ln)
	tc := p.expose(t, ln.Addr().String())
	data := randomBytes(8 << 20)
	var once sync.Once
	got := echoThrough(t, dial(t, tc.Listen), data, func(n int) {
		if n > 2<<20 {
			once.Do(func() { cutStream(t, p.b) })
		}
	})
	if !bytes.Equal(got, data) {
		t.Fatalf("echo across the cut differs: %d bytes of %d", len(got), len(data))
	}
	if m := p.b.List().Connects[0].Migrations; m != 1 {
		t.Fatalf("%d migrations, want 1", m)
	}
}

// limitedStream makes a stream look relayed.
type limitedStream struct{ network.Stream }

func (s limitedStream) Conn() network.Conn { return limitedConn{s.Stream.Conn()} }

type limitedConn struct{ network.Conn }

func (c limitedConn) Stat() network.ConnStats {
	st := c.Conn.Stat()
	st.Limited = true
	return st
}

// relayDialer opens "relayed" streams; OpenDirect works only once direct
// is set.
type relayDialer struct {
	HostDialer
	direct atomic.Bool
}

func (d *relayDialer) Open(ctx context.Context, p peer.ID) (network.Stream, error) {
	s, err := d.HostDialer.Open(ctx, p)
	if err != nil {
		return nil, err
	}
	return limitedStream{s}, nil
}

func (d *relayDialer) OpenDirect(ctx context.Context, p peer.ID) (network.Stream, error) {
	if !d.direct.Load() {
		return nil, errors.New("no direct connection (test)")
	}
	return d.HostDialer.OpenDirect(ctx, p)
}

func TestTunnelMovesToDirect(t *testing.T) {
	ha, hb := newHost(t), newHost(t)
	connectHosts(t, hb, ha)
	d := &relayDialer{HostDialer: HostDialer{H: hb}}
	p := pair{ha: ha, hb: hb, a: newManager(t, ha, Config{Window: 256 << 10}), b: newManager(t, hb, Config{Window: 256 << 10}, WithDialer(d))}
	ln := listen(t)
	echoServer(t, ln)
	tc := p.expose(t, ln.Addr().String())
	data := randomBytes(8 << 20)
	var once sync.Once
	got := echoThrough(t, dial(t, tc.Listen), data, func(n int) {
		if n > 1<<20 {
			once.Do(func() {
				cs := p.b.List().Connects[0].Conns
				if len(cs) != 1 || cs[0].Path != "relayed" {
					t.Errorf("before: %+v, want one relayed connection", cs)
				}
				d.direct.Store(true)
				p.b.migrateTo(ha.ID()) // what a new direct connection triggers
				// The move runs beside the transfer; on a loaded machine
				// the rest of the data could all cross before it does.
				// Reading nothing until it is done keeps bytes in flight
				// across it (the rest of the 8 MiB is in the windows and
				// the echo server's buffers).
				waitFor(t, "the move to the direct connection", func() bool { return p.b.List().Connects[0].Migrations == 1 })
			})
		}
	})
	if !bytes.Equal(got, data) {
		t.Logf("connect: %+v", p.b.List().Connects[0])
		t.Fatalf("echo across the move differs: %d bytes of %d", len(got), len(data))
	}
	if m := p.b.List().Connects[0].Migrations; m != 1 {
		t.Fatalf("%d migrations, want 1", m)
	}
}

func TestTunnelRelayCutReported(t *testing.T) {
	ha, hb := newHost(t), newHost(t)
	connectHosts(t, hb, ha)
	d := &relayDialer{HostDialer: HostDialer{H: hb}}
	a := newManager(t, ha, Config{ResumeGrace: time.Second})
	b := newManager(t, hb, Config{MigrateTimeout: 2 * time.Second}, WithDialer(d))
	p := pair{ha: ha, hb: hb, a: a, b: b}
	ln := listen(t)
	echoServer(t, ln)
	tc := p.expose(t, ln.Addr().String())
	c := dial(t, tc.Listen)
	_ = c.SetReadDeadline(time.Now().Add(testDeadline))
	_, _ = c.Write([]byte("x"))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	cutStream(t, b) // as the relay's limit would: once, it resumes on a new circuit
	waitFor(t, "the connection resumes on a new circuit", func() bool { return b.List().Connects[0].Migrations == 1 })
	_, _ = c.Write([]byte("y"))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatalf("after the first cut: %v", err)
	}
	cutStream(t, b) // twice: no more circuits
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes after the cut", n)
	}
	l := b.List().Connects[0]
	if l.RelayCuts != 1 || !strings.Contains(l.LastError, "relay") || !strings.Contains(l.LastError, RelayLimitText) {
		t.Fatalf("the cut is not reported: %+v", l)
	}
}

func TestTunnelBusy(t *testing.T) {
	p := newPair(t, Config{MaxConnsPerService: 1})
	ln := listen(t)
	echoServer(t, ln)
	tc := p.expose(t, ln.Addr().String())
	c1 := dial(t, tc.Listen)
	_ = c1.SetReadDeadline(time.Now().Add(testDeadline))
	_, _ = c1.Write([]byte("x"))
	if _, err := io.ReadFull(c1, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	c2 := dial(t, tc.Listen)
	_ = c2.SetReadDeadline(time.Now().Add(testDeadline))
	if n, err := c2.Read(make([]byte, 1)); err == nil {
		t.Fatalf("a connection beyond the limit read %d bytes", n)
	}
	l := p.b.List().Connects[0]
	if !strings.Contains(l.LastError, "busy") || p.a.List().Exposed[0].Busy != 1 {
		t.Fatalf("busy not reported: %+v / %+v", l, p.a.List().Exposed[0])
	}
}

func TestExposeArguments(t *testing.T) {
	m := newManager(t, newHost(t), Config{})
	other := newHost(t).ID()
	for _, tc := range []struct {
		name, svc, target string
		allow             []peer.ID
		any               bool
	}{
		{name: "no allow-list", svc: "a", target: "127.0.0.1:1"},
		{name: "both", svc: "a", target: "127.0.0.1:1", allow: []peer.ID{other}, any: true},
		{name: "bad name", svc: "a/b", target: "127.0.0.1:1", any: true},
		{name: "bad target", svc: "a", target: "nowhere", any: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := m.Expose(tc.svc, tc.target, tc.allow, tc.any); !errors.Is(err, ErrInvalid) {
				t.Fatalf("err %v, want ErrInvalid", err)
			}
		})
	}
	if _, err := m.Expose("a", "127.0.0.1:1", nil, true); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Expose("a", "127.0.0.1:1", nil, true); !errors.Is(err, ErrExists) {
		t.Fatalf("second expose: %v", err)
	}
	if err := m.Unexpose("a"); err != nil {
		t.Fatal(err)
	}
	if err := m.Unexpose("a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second unexpose: %v", err)
	}

}

// TestTunnelWindowsDiffer: the two sides' windows are their own settings;
// a small window on one side and a large one on the other still flow.
func TestTunnelWindowsDiffer(t *testing.T) {
	ha, hb := newHost(t), newHost(t)
	connectHosts(t, hb, ha)
	p := pair{ha: ha, hb: hb, a: newManager(t, ha, Config{Window: 8 << 20}), b: newManager(t, hb, Config{Window: MinWindow})}
	ln := listen(t)
	go func() { // a sink: reads everything, then answers with its digest
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		h := sha256.New()
		_, _ = io.Copy(h, s)
		_, _ = s.Write(h.Sum(nil))
	}()
	tc := p.expose(t, ln.Addr().String())
	data := randomBytes(4 << 20)
	sum := sha256.Sum256(data)
	if got := echoThrough(t, dial(t, tc.Listen), data, nil); !bytes.Equal(got, sum[:]) {
		t.Fatalf("the sink's digest differs: %x", got)
	}
}

// hangingDialer is relayDialer whose direct attempt waits until its
// context ends, as the swarm does for hole punching that never comes; it
// counts the opens marked AfterCut.
type hangingDialer struct {
	relayDialer
	afterCut atomic.Int32
}

func (d *hangingDialer) Open(ctx context.Context, p peer.ID) (network.Stream, error) {
	if AfterCut(ctx) {
		d.afterCut.Add(1)
	}
	return d.relayDialer.Open(ctx, p)
}

func (d *hangingDialer) OpenDirect(ctx context.Context, _ peer.ID) (network.Stream, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestTunnelRelayCutPrompt: after a relay cut with no direct path the
// connection resumes on a fresh circuit at once and, cut again, fails at
// once with the relay cut reported, not after the migration timeout
// (a minute here) spent waiting for a direct connection.
func TestTunnelRelayCutPrompt(t *testing.T) {
	ha, hb := newHost(t), newHost(t)
	connectHosts(t, hb, ha)
	d := &hangingDialer{relayDialer: relayDialer{HostDialer: HostDialer{H: hb}}}
	a := newManager(t, ha, Config{ResumeGrace: time.Second})
	b := newManager(t, hb, Config{MigrateTimeout: time.Minute, CutDirectTimeout: 100 * time.Millisecond}, WithDialer(d))
	p := pair{ha: ha, hb: hb, a: a, b: b}
	ln := listen(t)
	echoServer(t, ln)
	tc := p.expose(t, ln.Addr().String())
	c := dial(t, tc.Listen)
	_ = c.SetReadDeadline(time.Now().Add(testDeadline))
	_, _ = c.Write([]byte("x"))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	cutStream(t, b)
	waitFor(t, "the connection resumes on a new circuit", func() bool { return b.List().Connects[0].Migrations == 1 })
	_, _ = c.Write([]byte("y"))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatalf("after the first cut: %v", err)
	}
	t.Logf("resumed after %v", time.Since(t0))
	if n := d.afterCut.Load(); n != 1 {
		t.Fatalf("%d opens marked AfterCut, want 1 (the fresh circuit)", n)
	}
	t0 = time.Now()
	cutStream(t, b)
	_, err := c.Read(make([]byte, 1))
	t.Logf("closed after %v: %v", time.Since(t0), err)
	if ne, ok := err.(net.Error); err == nil || ok && ne.Timeout() {
		t.Fatalf("after the second cut, read: %v; want the connection closed", err)
	}
	if l := b.List().Connects[0]; l.RelayCuts != 1 || !strings.Contains(l.LastError, RelayLimitText) {
		t.Fatalf("the cut is not reported: %+v", l)
	}
}
