//go:build linux

package bench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Tunnels: overlayd's `expose`/`connect` against plain TCP and Kubo's
// `ipfs p2p listen`/`forward`, in the same run. See kubo/README.md.
//
// BenchmarkTunnel/path=P/op=O, for each path P:
//
//	tcp               the client dials the service itself: the physical limit
//	kubo              two Kubo daemons on loopback: ipfs p2p listen on one,
//	                  ipfs p2p forward on the other (TCP transport)
//	overlayd-direct   a supernode and two ordinary overlayd daemons on
//	                  loopback (TCP): expose on one, connect on the other
//	overlayd-relayed  the same in network namespaces where the two ordinary
//	                  daemons reach only the supernode (relayNetns), so the
//	                  tunnel runs through the supernode's circuit relay
//
// and each op O:
//
//	bulk-<size>  per iteration: open a connection through the path, send
//	             <size> bytes, wait for the service's 1-byte acknowledgement
//	             after the last byte (MB/s from b.SetBytes)
//	echo         per iteration: echoSeries round trips of 64 bytes on one
//	             connection; ns/op is the mean round trip, p50-µs and
//	             p99-µs its percentiles over all round trips
//
// cpu-ms/MiB is utime+stime of the path's daemons (from /proc/<pid>/stat)
// over the timed part, per MiB carried; relay-cpu-ms/MiB is the
// supernode's share on the relayed path.
//
// The supernode's relay cuts a circuit after 128 KiB per direction
// (node/circuit/limits.go), and a tunnel connection cut so with no direct path to
// move to ends (after a wait for hole punching, and new connections then
// meet the swarm's dial backoff for a while). So on path=overlayd-relayed
// the supernode keeps the default 128 KiB but ends circuits after
// limitedCircuitDuration; with the timer stopped, each iteration waits for
// the old circuit to end and opens a new one with an echo; its bulk is
// bulkRelayed, which fits in one circuit with the tunnel's framing.
// path=overlayd-relayed-raised runs the supernode with
// --relay-circuit-data 1 TiB and --relay-circuit-duration 1h, so bulk
// transfers of any size cross the relay.
//
// BenchmarkRelayConnections: tunnel connections per second through one
// supernode relay (open a connection, one echo, close) and the supernode's
// CPU per connection and per relayed MiB (its overlayd_relay_bytes_total,
// both directions). The relay's CPU per MiB of bulk payload is
// relay-cpu-ms/MiB of BenchmarkTunnel's relayed paths.

const (
	kuboVersion = "v0.43.1"
	echoSize    = 64
	echoSeries  = 100
	// bulkRelayed is what one relayed circuit carries in a bulk
	// iteration, under the relay's 128 KiB per direction with room for
	// the framing, the connection's opening and the warm-up echo.
	bulkRelayed = 96 << 10
	mib         = 1 << 20
	// raisedCircuitData is --relay-circuit-data on
	// path=overlayd-relayed-raised: more than a run sends on one circuit.
	raisedCircuitData = 1 << 40
	// limitedCircuitDuration is --relay-circuit-duration on
	// path=overlayd-relayed: each iteration runs on a fresh circuit, which
	// ends this long after it opened, with no tunnel connection on it.
	limitedCircuitDuration = 2 * time.Second
	// opTimeout bounds one operation on a connection.
	opTimeout = 2 * time.Minute
)

// Service operations, the first byte a client sends.
const (
	opSink = 'S' // then a big-endian uint64 n; the service reads n bytes and answers 'K'
	opEcho = 'E' // the service echoes echoSize-byte messages until EOF
)

// service is the TCP service the tunnels carry connections to.
type service struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// startService listens on 127.0.0.1 in network namespace ns.
func startService(b *testing.B, cl *cleanups, ns string) *service {
	b.Helper()
	ln, err := listenIn(ns, "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := &service{ln: ln, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	cl.add(func() {
		ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *service) addr() string { return s.ln.Addr().String() }

func (s *service) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			serve(c)
		}()
	}
}

func serve(c net.Conn) {
	var op [1]byte
	if _, err := io.ReadFull(c, op[:]); err != nil {
		return
	}
	switch op[0] {
	case opSink:
		var hdr [8]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint64(hdr[:])
		buf := make([]byte, min(n, 256<<10))
		for n > 0 {
			k, err := c.Read(buf[:min(uint64(len(buf)), n)])
			n -= uint64(k)
			if err != nil {
				return
			}
		}
		_, _ = c.Write([]byte{'K'})
	case opEcho:
		buf := make([]byte, echoSize)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}
}

// sendBulk sends n bytes on a new connection and waits for the acknowledgement.
func sendBulk(c net.Conn, n int, payload []byte) error {
	_ = c.SetDeadline(time.Now().Add(opTimeout))
	hdr := make([]byte, 9)
	hdr[0] = opSink
	binary.BigEndian.PutUint64(hdr[1:], uint64(n))
	if _, err := c.Write(hdr); err != nil {
		return err
	}
	for left := n; left > 0; {
		k, err := c.Write(payload[:min(left, len(payload))])
		left -= k
		if err != nil {
			return fmt.Errorf("after %d of %d bytes: %w", n-left, n, err)
		}
	}
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		return fmt.Errorf("acknowledgement of %d bytes: %w", n, err)
	}
	if ack[0] != 'K' {
		return fmt.Errorf("acknowledgement %q", ack[0])
	}
	return nil
}

// startEcho sends the echo operation.
func startEcho(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(opTimeout))
	_, err := c.Write([]byte{opEcho})
	return err
}

// echoOnce does one round trip of echoSize bytes.
func echoOnce(c net.Conn, msg, got []byte) error {
	if _, err := c.Write(msg); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if string(got) != string(msg) {
		return errors.New("echo differs")
	}
	return nil
}

// tunnelPath is one way from the client to the service.
type tunnelPath struct {
	name string
	dial func(context.Context) (net.Conn, error)
	// daemons are the path's processes whose CPU counts; relay is the
	// supernode whose relay the path must (relayed) or must not (direct)
	// use; nil on paths without overlayd.
	daemons []int
	relay   *ovDaemon
	relayed bool
	// limited: the relay cuts a circuit after 128 KiB per direction
	// (and, here, after limitedCircuitDuration): every iteration starts
	// on a fresh circuit and fits in it.
	limited bool
	// bulk is the size of a bulk iteration.
	bulk int
}

// readyEcho opens a connection and does one echo, retrying for a while: a
// tunnel's first connection may find no path yet (and, relayed, a circuit
// just cut by the relay is replaced on the next attempt).
func (p *tunnelPath) readyEcho(ctx context.Context) error {
	msg, got := make([]byte, echoSize), make([]byte, echoSize)
	return poll(ctx, 30*time.Second, 50*time.Millisecond, p.name+": first echo", func() (bool, error) {
		c, err := p.dial(ctx)
		if err != nil {
			return false, err
		}
		defer c.Close()
		if err := startEcho(c); err != nil {
			return false, err
		}
		if err := echoOnce(c, msg, got); err != nil {
			return false, err
		}
		return true, nil
	})
}

// freshCircuit, on a limited path, waits until the supernode holds no
// circuit (the one the path used ended at its --relay-circuit-duration)
// and opens the next one with an echo.
func (p *tunnelPath) freshCircuit(ctx context.Context) error {
	if !p.limited {
		return nil
	}
	err := poll(ctx, 30*time.Second, 20*time.Millisecond, p.name+": the relay's circuit to end", func() (bool, error) {
		st, err := p.relay.status(ctx)
		if err != nil {
			return false, err
		}
		var svc struct {
			Circuits *int `json:"circuits"`
		}
		if st.Relay == nil || json.Unmarshal(st.Relay.Service, &svc) != nil || svc.Circuits == nil {
			return false, fmt.Errorf("no relay service circuits in status")
		}
		return *svc.Circuits == 0, nil
	})
	if err != nil {
		return err
	}
	return p.readyEcho(ctx)
}

// usage accumulates the daemons' CPU and the relay's bytes over the timed
// parts of a benchmark.
type usage struct {
	p             *tunnelPath
	cpu, relayCPU int64
	relayBytes    float64
	c0, r0        int64
	b0            float64
}

func (u *usage) start(ctx context.Context, b *testing.B) {
	b.Helper()
	var err error
	if u.c0, err = cpuTicks(u.p.daemons); err != nil {
		b.Fatal(err)
	}
	if u.p.relay != nil {
		if u.r0, err = cpuTicks([]int{u.p.relay.pid()}); err != nil {
			b.Fatal(err)
		}
		if u.b0, err = u.p.relay.metric(ctx, "overlayd_relay_bytes_total"); err != nil {
			b.Fatal(err)
		}
	}
}

func (u *usage) stop(ctx context.Context, b *testing.B) {
	b.Helper()
	c1, err := cpuTicks(u.p.daemons)
	if err != nil {
		b.Fatal(err)
	}
	u.cpu += c1 - u.c0
	if u.p.relay != nil {
		r1, err := cpuTicks([]int{u.p.relay.pid()})
		if err != nil {
			b.Fatal(err)
		}
		u.relayCPU += r1 - u.r0
		b1, err := u.p.relay.metric(ctx, "overlayd_relay_bytes_total")
		if err != nil {
			b.Fatal(err)
		}
		u.relayBytes += b1 - u.b0
	}
}

// report adds cpu-ms/MiB (and relay-cpu-ms/MiB) for carried bytes, and
// fails the benchmark if the path used the relay when it must not, or not
// when it must.
func (u *usage) report(b *testing.B, carried float64, withCPU bool) {
	b.Helper()
	if withCPU && len(u.p.daemons) > 0 {
		b.ReportMetric(float64(u.cpu)*1000/userHZ/(carried/mib), "cpu-ms/MiB")
	}
	if u.p.relay == nil {
		return
	}
	if u.p.relayed {
		if withCPU {
			b.ReportMetric(float64(u.relayCPU)*1000/userHZ/(carried/mib), "relay-cpu-ms/MiB")
		}
		if u.relayBytes < carried {
			b.Fatalf("%s: the supernode relayed %.0f bytes while the path carried %.0f: not relayed", u.p.name, u.relayBytes, carried)
		}
	} else if u.relayBytes > carried/2 {
		b.Fatalf("%s: the supernode relayed %.0f bytes while the path carried %.0f: not direct", u.p.name, u.relayBytes, carried)
	}
}

func benchBulk(b *testing.B, p *tunnelPath) {
	ctx := b.Context()
	payload := make([]byte, 256<<10)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	u := &usage{p: p}
	var slowest time.Duration
	b.SetBytes(int64(p.bulk))
	b.ResetTimer()
	b.StopTimer()
	for i := range b.N {
		if err := p.freshCircuit(ctx); err != nil {
			b.Fatal(err)
		}
		u.start(ctx, b)
		b.StartTimer()
		t0 := time.Now()
		c, err := p.dial(ctx)
		if err != nil {
			b.Fatal(err)
		}
		err = sendBulk(c, p.bulk, payload)
		c.Close()
		b.StopTimer()
		took := time.Since(t0)
		if err != nil {
			b.Fatalf("iteration %d, after %v: %v", i, took.Round(time.Millisecond), err)
		}
		slowest = max(slowest, took)
		u.stop(ctx, b)
	}
	b.ReportMetric(float64(slowest.Microseconds())/1000, "max-ms")
	u.report(b, float64(b.N)*float64(p.bulk), true)
}

func benchEcho(b *testing.B, p *tunnelPath) {
	ctx := b.Context()
	msg, got := make([]byte, echoSize), make([]byte, echoSize)
	for i := range msg {
		msg[i] = byte('a' + i%26)
	}
	u := &usage{p: p}
	rtts := make([]time.Duration, 0, b.N*echoSeries)
	var c net.Conn
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	b.ResetTimer()
	b.StopTimer()
	for i := range b.N {
		if c == nil || p.limited {
			if c != nil {
				c.Close()
				c = nil
			}
			if err := p.freshCircuit(ctx); err != nil {
				b.Fatal(err)
			}
			var err error
			if c, err = p.dial(ctx); err != nil {
				b.Fatal(err)
			}
			if err := startEcho(c); err != nil {
				b.Fatal(err)
			}
			if err := echoOnce(c, msg, got); err != nil { // the connection's first round trip opens it
				b.Fatal(err)
			}
		}
		u.start(ctx, b)
		b.StartTimer()
		for range echoSeries {
			t0 := time.Now()
			if err := echoOnce(c, msg, got); err != nil {
				b.Fatalf("iteration %d: %v", i, err)
			}
			rtts = append(rtts, time.Since(t0))
		}
		b.StopTimer()
		u.stop(ctx, b)
	}
	slices.Sort(rtts)
	pct := func(q float64) float64 { return float64(rtts[int(q*float64(len(rtts)-1))].Microseconds()) }
	var sum time.Duration
	for _, r := range rtts {
		sum += r
	}
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(rtts)), "ns/op")
	b.ReportMetric(pct(0.5), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	u.report(b, float64(len(rtts))*2*echoSize, false) // too few bytes for CPU per MiB
}

func BenchmarkTunnel(b *testing.B) {
	big := 64 * mib
	if testing.Short() {
		big = 4 * mib
	}
	paths := []struct {
		name  string
		setup func(*testing.B, *cleanups) *tunnelPath
	}{
		{"tcp", setupTCP},
		{"kubo", setupKubo},
		{"overlayd-direct", setupOverlaydDirect},
		{"overlayd-relayed", func(b *testing.B, cl *cleanups) *tunnelPath { return setupOverlaydRelayed(b, cl, false) }},
		{"overlayd-relayed-raised", func(b *testing.B, cl *cleanups) *tunnelPath { return setupOverlaydRelayed(b, cl, true) }},
	}
	for _, pt := range paths {
		var (
			cl   cleanups
			p    *tunnelPath
			done bool // setup ran (p is nil if it skipped or failed)
		)
		// The path is set up on its first sub-benchmark and torn down
		// after its last, so that its daemons serve every op.
		get := func(b *testing.B) *tunnelPath {
			if !done {
				done = true
				p = pt.setup(b, &cl)
			}
			if p == nil {
				b.Skip("path setup skipped or failed above")
			}
			return p
		}
		b.Run("path="+pt.name, func(b *testing.B) {
			ops := []struct {
				name string
				f    func(*testing.B, *tunnelPath)
			}{
				{"bulk-" + sizeName(bulkRelayed), func(b *testing.B, p *tunnelPath) { q := *p; q.bulk = bulkRelayed; benchBulk(b, &q) }},
				{"bulk-" + sizeName(big), func(b *testing.B, p *tunnelPath) {
					if p.limited {
						b.Skipf("a relayed circuit carries 128 KiB per direction: see op=bulk-%s here, and path=overlayd-relayed-raised", sizeName(bulkRelayed))
					}
					q := *p
					q.bulk = big
					benchBulk(b, &q)
				}},
				{"echo", benchEcho},
			}
			for _, op := range ops {
				b.Run("op="+op.name, func(b *testing.B) { op.f(b, get(b)) })
			}
		})
		cl.run()
	}
}

func sizeName(n int) string {
	if n%mib == 0 {
		return strconv.Itoa(n/mib) + "MiB"
	}
	return strconv.Itoa(n>>10) + "KiB"
}

func setupTCP(b *testing.B, cl *cleanups) *tunnelPath {
	svc := startService(b, cl, "")
	return &tunnelPath{name: "tcp", dial: func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", svc.addr())
	}}
}

func setupKubo(b *testing.B, cl *cleanups) *tunnelPath {
	bin := kuboBinary(b)
	ctx := b.Context()
	svc := startService(b, cl, "")
	dir := shortDir(b, cl, "kubo-")
	srv := startKubo(ctx, b, cl, bin, dir, "ka")
	cli := startKubo(ctx, b, cl, bin, dir, "kb")
	cli.cli(ctx, b, "swarm", "connect", srv.swarmAddr(ctx, b))
	srv.cli(ctx, b, "p2p", "listen", "/x/bench", "/ip4/127.0.0.1/tcp/"+portOf(b, svc.addr()))
	local := freePort(b, "")
	cli.cli(ctx, b, "p2p", "forward", "/x/bench", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", local), "/p2p/"+srv.id)
	addr := fmt.Sprintf("127.0.0.1:%d", local)
	p := &tunnelPath{name: "kubo", daemons: []int{srv.pid(), cli.pid()}, dial: func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}}
	if err := p.readyEcho(ctx); err != nil {
		b.Fatalf("%v\nka:\n%s\nkb:\n%s", err, srv.logTail(), cli.logTail())
	}
	return p
}

func portOf(b *testing.B, addr string) string {
	b.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		b.Fatal(err)
	}
	return port
}

// setupOverlaydDirect: supernode S, exposing peer A and connecting peer B,
// all on 127.0.0.1 (TCP only, like the Kubo path).
func setupOverlaydDirect(b *testing.B, cl *cleanups) *tunnelPath {
	bin := overlaydBinary(b)
	requireTunnels(b, bin)
	ctx := b.Context()
	svc := startService(b, cl, "")
	dir := shortDir(b, cl, "ovd-")
	listen := []string{"--listen", "/ip4/127.0.0.1/tcp/0"}
	s := startOverlayd(ctx, b, cl, bin, dir, "", "s", freePort(b, ""), append([]string{"--role", "supernode", "--capacity", "10"}, listen...)...)
	st := s.waitStatus(ctx, b, "relay service", func(st ovStatus) bool { return st.Relay != nil && len(st.Relay.Service) > 0 })
	boot, err := loopbackTCP(st, "127.0.0.1")
	if err != nil {
		b.Fatal(err)
	}
	peerArgs := append([]string{"--role", "ordinary", "--bootstrap", boot}, listen...)
	a := startOverlayd(ctx, b, cl, bin, dir, "", "a", freePort(b, ""), peerArgs...)
	bb := startOverlayd(ctx, b, cl, bin, dir, "", "b", freePort(b, ""), peerArgs...)
	for _, d := range []*ovDaemon{a, bb} {
		d.waitStatus(ctx, b, "attached", func(st ovStatus) bool { return len(st.Attachment) > 0 && string(st.Attachment) != "null" })
	}
	a.expose(ctx, b, "bench", svc.addr(), bb.id)
	addr := bb.connect(ctx, b, a.id, "bench", fmt.Sprintf("127.0.0.1:%d", freePort(b, "")))
	p := &tunnelPath{name: "overlayd-direct", daemons: []int{a.pid(), bb.pid()}, relay: s, dial: func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}}
	if err := p.readyEcho(ctx); err != nil {
		b.Fatalf("%v\na:\n%s\nb:\n%s", err, a.logTail(), bb.logTail())
	}
	// On loopback every address is private: A holds a reservation on S,
	// B finds A through S (locate) and its first connections go through
	// S's relay. go-libp2p's hole punching waits for a public address, so
	// nothing upgrades the relayed connection here until the relay cuts
	// it (128 KiB per direction) and the tunnel moves its connection to a
	// direct one (B now knows A's addresses). So: one 1 MiB transfer, then
	// measure once an echo no longer crosses the relay.
	payload := make([]byte, 64<<10)
	c, err := p.dial(ctx)
	if err != nil {
		b.Fatal(err)
	}
	err = sendBulk(c, mib, payload)
	c.Close()
	if err != nil {
		b.Fatalf("overlayd-direct: warm-up transfer: %v", err)
	}
	err = poll(ctx, 30*time.Second, 100*time.Millisecond, "overlayd-direct: a tunnel connection that bypasses the relay", func() (bool, error) {
		r0, err := s.metric(ctx, "overlayd_relay_bytes_total")
		if err != nil {
			return false, err
		}
		if err := p.readyEcho(ctx); err != nil {
			return false, err
		}
		r1, err := s.metric(ctx, "overlayd_relay_bytes_total")
		if err == nil && r1 != r0 {
			err = fmt.Errorf("an echo: the relay's bytes went from %.0f to %.0f", r0, r1)
		}
		return err == nil, err
	})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// relayedNet starts the relayed topology (relayNetns): S in s listening
// on both links, A in a and B in b, each attached to S, A holding a relay
// reservation on S. The service listens in a.
func relayedNet(b *testing.B, cl *cleanups, raised bool) (s, a, bb *ovDaemon, svc *service) {
	bin := overlaydBinary(b)
	requireTunnels(b, bin)
	out, _ := exec.Command(bin, "run", "--help").CombinedOutput()
	if !strings.Contains(string(out), "--relay-circuit-duration") {
		b.Skipf("%s has no --relay-circuit-data/-duration: the relay's circuit limits cannot be set", bin)
	}
	sArgs := []string{"--relay-circuit-duration", limitedCircuitDuration.String()}
	if raised {
		sArgs = []string{"--relay-circuit-data", strconv.Itoa(raisedCircuitData), "--relay-circuit-duration", "1h"}
	}
	n := relayNetns(b, cl)
	ctx := b.Context()
	svc = startService(b, cl, n.a)
	dir := shortDir(b, cl, "ovr-")
	// Fresh namespaces: fixed ports are free.
	s = startOverlayd(ctx, b, cl, bin, dir, n.s, "s", 9100, append([]string{"--role", "supernode", "--capacity", "10",
		"--listen", "/ip4/" + relNetA + ".1/tcp/4101", "--listen", "/ip4/" + relNetB + ".1/tcp/4101"}, sArgs...)...)
	s.waitStatus(ctx, b, "relay service", func(st ovStatus) bool { return st.Relay != nil && len(st.Relay.Service) > 0 })
	a = startOverlayd(ctx, b, cl, bin, dir, n.a, "a", 9100, "--role", "ordinary",
		"--bootstrap", fmt.Sprintf("/ip4/%s.1/tcp/4101/p2p/%s", relNetA, s.id), "--listen", "/ip4/"+relNetA+".2/tcp/4101")
	bb = startOverlayd(ctx, b, cl, bin, dir, n.b, "b", 9100, "--role", "ordinary",
		"--bootstrap", fmt.Sprintf("/ip4/%s.1/tcp/4101/p2p/%s", relNetB, s.id), "--listen", "/ip4/"+relNetB+".2/tcp/4101")
	a.waitStatus(ctx, b, "relay reservation on S", func(st ovStatus) bool {
		return st.Relay != nil && len(st.Relay.Reservation) > 0 && string(st.Relay.Reservation) != "null"
	})
	bb.waitStatus(ctx, b, "attached", func(st ovStatus) bool { return len(st.Attachment) > 0 && string(st.Attachment) != "null" })
	return s, a, bb, svc
}

func setupOverlaydRelayed(b *testing.B, cl *cleanups, raised bool) *tunnelPath {
	s, a, bb, svc := relayedNet(b, cl, raised)
	ctx := b.Context()
	a.expose(ctx, b, "bench", svc.addr(), bb.id)
	addr := bb.connect(ctx, b, a.id, "bench", "127.0.0.1:7000")
	name := "overlayd-relayed"
	if raised {
		name += "-raised"
	}
	p := &tunnelPath{name: name, daemons: []int{a.pid(), bb.pid(), s.pid()}, relay: s, relayed: true, limited: !raised,
		dial: func(ctx context.Context) (net.Conn, error) { return dialIn(ctx, bb.ns, addr) }}
	if err := p.readyEcho(ctx); err != nil {
		b.Fatalf("%v\na:\n%s\nb:\n%s", err, a.logTail(), bb.logTail())
	}
	return p
}

// BenchmarkRelayConnections: per iteration one tunnel connection through
// the supernode's relay (open, one 64-byte echo, close), from conc clients
// at once. The tunnel connections are streams on one relayed circuit; the
// supernode runs with path=overlayd-relayed-raised's limits, so that the
// circuit is not cut (with the default 128 KiB it would be, every
// 128 KiB / (relayed-B/op / 2) connections). A failed connection is
// counted in failed/op and retried.
func BenchmarkRelayConnections(b *testing.B) {
	var (
		cl   cleanups
		p    *tunnelPath
		done bool // setup ran (p is nil if it skipped or failed)
	)
	defer cl.run()
	get := func(b *testing.B) *tunnelPath {
		if !done {
			done = true
			s, a, bb, svc := relayedNet(b, &cl, true)
			ctx := b.Context()
			a.expose(ctx, b, "bench", svc.addr(), bb.id)
			addr := bb.connect(ctx, b, a.id, "bench", "127.0.0.1:7000")
			q := &tunnelPath{name: "relay", daemons: []int{s.pid()}, relay: s, relayed: true,
				dial: func(ctx context.Context) (net.Conn, error) { return dialIn(ctx, bb.ns, addr) }}
			if err := q.readyEcho(ctx); err != nil {
				b.Fatal(err)
			}
			p = q
		}
		if p == nil {
			b.Skip("relay setup skipped or failed above")
		}
		return p
	}
	for _, conc := range []int{1, 8} {
		b.Run("conc="+strconv.Itoa(conc), func(b *testing.B) {
			p := get(b)
			ctx := b.Context()
			var next, cuts atomic.Int64
			u := &usage{p: p}
			u.start(ctx, b)
			t0 := time.Now()
			b.ResetTimer()
			var wg sync.WaitGroup
			errc := make(chan error, conc)
			for range conc {
				wg.Go(func() {
					msg, got := make([]byte, echoSize), make([]byte, echoSize)
					for next.Add(1) <= int64(b.N) {
						for try := 0; ; try++ {
							err := oneConn(ctx, p, msg, got)
							if err == nil {
								break
							}
							cuts.Add(1)
							if try == 20 {
								errc <- err
								return
							}
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			el := time.Since(t0)
			u.stop(ctx, b)
			select {
			case err := <-errc:
				b.Fatalf("20 attempts in a row failed: %v", err)
			default:
			}
			if u.relayBytes < float64(b.N)*2*echoSize {
				b.Fatalf("the supernode relayed %.0f bytes for %d echoes: not relayed", u.relayBytes, b.N)
			}
			b.ReportMetric(float64(b.N)/el.Seconds(), "conns/s")
			b.ReportMetric(float64(cuts.Load())/float64(b.N), "failed/op")
			b.ReportMetric(u.relayBytes/float64(b.N), "relayed-B/op")
			b.ReportMetric(float64(u.relayCPU)*1000/userHZ/(u.relayBytes/mib), "relay-cpu-ms/MiB")
			b.ReportMetric(float64(u.relayCPU)*1e6/userHZ/float64(b.N), "relay-cpu-µs/op")
		})
	}
}

func oneConn(ctx context.Context, p *tunnelPath, msg, got []byte) error {
	c, err := p.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := startEcho(c); err != nil {
		return err
	}
	return echoOnce(c, msg, got)
}
