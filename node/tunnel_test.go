package node

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/node/circuit"
	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/node/tunnel"
)

// tunnelEcho starts an echo server on loopback for the test.
func tunnelEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// relayedEchoPair starts a supernode of capacity 2 with its relay, a
// private client A reserved on it that exposes an echo service to B, and a
// client B: B can reach A only through the relay.
func relayedEchoPair(t *testing.T) (sn, a, b *Node) {
	t.Helper()
	c := attachConfig(t, config.RoleSupernode, "")
	c.Capacity = 2
	sn = startNode(t, c)
	a = startClient(t, p2pAddr(sn), WithReachability(network.ReachabilityPrivate))
	b = startClient(t, p2pAddr(sn))
	waitFor(t, 10*time.Second, "A reserved", func() bool { return reservedOn(a) == sn.ID() })
	waitFor(t, 10*time.Second, "B attached", func() bool { return b.attachmentForTest() != "" })
	if _, err := a.Tunnels().Expose("echo", tunnelEcho(t), []peer.ID{b.ID()}, false); err != nil {
		t.Fatal(err)
	}
	return sn, a, b
}

// tunnelRoundTrip sends one byte through the connect listener at addr and
// returns the error of reading the echo.
func tunnelRoundTrip(t *testing.T, addr string) error {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	_, _ = c.Write([]byte("x"))
	_, err = io.ReadFull(c, make([]byte, 1))
	return err
}

// TestTunnelThroughRelay: B reaches a service of A, a private client, by
// peer ID only: B locates A's supernode and the tunnel goes through its
// relay.
func TestTunnelThroughRelay(t *testing.T) {
	_, a, b := relayedEchoPair(t)
	tc, err := b.Tunnels().Connect(t.Context(), a.ID(), "echo", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := tunnelRoundTrip(t, tc.Listen); err != nil {
		t.Fatalf("echo through the tunnel: %v (%+v)", err, b.Tunnels().List().Connects)
	}
}

// TestTunnelRelayBusy: a supernode whose relay is at its circuit bound
// refuses the tunnel's circuit, and the connecting side says "supernode
// relay busy" rather than timing out.
func TestTunnelRelayBusy(t *testing.T) {
	sn, a, b := relayedEchoPair(t)
	// Fill the relay: every circuit it may hold, from strangers to A.
	through := circuit.Through(peer.AddrInfo{ID: sn.ID(), Addrs: sn.Host().Addrs()})
	max := sn.relayStatus().Service.MaxCircuits
	for i := range max {
		h := rawHost(t)
		if err := dialCircuit(t, h, a.ID(), through); err != nil {
			t.Fatalf("circuit %d of %d: %v", i, max, err)
		}
	}
	tc, err := b.Tunnels().Connect(t.Context(), a.ID(), "echo", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := tunnelRoundTrip(t, tc.Listen); err == nil {
		t.Fatal("a tunnel went through a full relay")
	}
	l := b.Tunnels().List().Connects[0]
	if !strings.Contains(l.LastError, "supernode relay busy") {
		t.Fatalf("the connecting side says %q, want supernode relay busy", l.LastError)
	}
	t.Logf("refused after %v: %s", time.Since(t0).Round(time.Millisecond), l.LastError)
	if got := refused(sn, circuit.RefusedCircuit); got < 1 {
		t.Fatalf("circuit refusals %v", got)
	}
}

func dialCircuit(t *testing.T, h host.Host, to peer.ID, circuit []ma.Multiaddr) error {
	ctx, cancel := context.WithTimeout(network.WithAllowLimitedConn(t.Context(), "test"), 5*time.Second)
	defer cancel()
	// Not Connect's own TempAddrTTL: identify, handling the close of an
	// earlier connection to the peer after this call has begun, drops
	// every address of that TTL, and the dial fails with "no addresses".
	h.Peerstore().AddAddrs(to, circuit, peerstore.AddressTTL)
	return h.Connect(ctx, peer.AddrInfo{ID: to})
}

// TestTunnelRelayAfterRefusal: a circuit the relay refused leaves the
// target's /p2p-circuit addresses in the swarm's dial backoff; once the
// relay has room again, the next tunnel connection goes through at once
// instead of failing with "dial backoff" for the backoff's 5 s.
func TestTunnelRelayAfterRefusal(t *testing.T) {
	sn, a, b := relayedEchoPair(t)
	through := circuit.Through(peer.AddrInfo{ID: sn.ID(), Addrs: sn.Host().Addrs()})
	var fill []host.Host
	for range sn.relayStatus().Service.MaxCircuits {
		h := rawHost(t)
		if err := dialCircuit(t, h, a.ID(), through); err != nil {
			t.Fatal(err)
		}
		fill = append(fill, h)
	}
	tc, err := b.Tunnels().Connect(t.Context(), a.ID(), "echo", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := tunnelRoundTrip(t, tc.Listen); err == nil {
		t.Fatal("a tunnel went through a full relay")
	}
	for _, h := range fill {
		_ = h.Close()
	}
	waitFor(t, 10*time.Second, "the relay empty", func() bool { return sn.relayStatus().Service.Circuits == 0 })
	if err := tunnelRoundTrip(t, tc.Listen); err != nil {
		t.Fatalf("the next tunnel connection, the relay having room: %v (%s)", err, b.Tunnels().List().Connects[0].LastError)
	}
}

// TestTunnelDialAfterCutGoesToRelay: resuming after a relay cut (the
// tunnel has just tried a direct connection) the node's dialer goes to the
// relay without first trying the peer's direct addresses for
// tunnel.DirectDialTimeout (here an address that accepts TCP and never answers
// the handshake, so that attempt takes all of it: without the behaviour
// Open cannot return sooner; with it, the relayed stream comes in a few
// milliseconds, and the swarm's parallel dial of that address does not
// hold it up).
func TestTunnelDialAfterCutGoesToRelay(t *testing.T) {
	c := attachConfig(t, config.RoleSupernode, "")
	c.Capacity = 2
	sn := startNode(t, c)
	a := startClient(t, p2pAddr(sn), WithReachability(network.ReachabilityPrivate))
	b := startClient(t, p2pAddr(sn))
	waitFor(t, 10*time.Second, "A reserved", func() bool { return reservedOn(a) == sn.ID() })
	waitFor(t, 10*time.Second, "B attached", func() bool { return b.attachmentForTest() != "" })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, silent
		}
	}()
	t.Cleanup(func() {
		for {
			select {
			case c := <-accepted:
				c.Close()
			default:
				return
			}
		}
	})
	silent, err := ma.NewMultiaddr("/ip4/127.0.0.1/tcp/" + strings.Split(ln.Addr().String(), ":")[1])
	if err != nil {
		t.Fatal(err)
	}
	_ = b.Host().Network().ClosePeer(a.ID())
	b.Host().Peerstore().ClearAddrs(a.ID())
	b.Host().Peerstore().AddAddr(a.ID(), silent, time.Hour)
	ctx, cancel := context.WithTimeout(tunnel.WithAfterCut(t.Context()), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	s, err := tunnel.RelayDialer{Host: b.host, Locator: b, Log: b.log}.Open(ctx, a.ID())
	took := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Reset()
	if !s.Conn().Stat().Limited {
		t.Fatal("the stream is not relayed")
	}
	t.Logf("relayed stream after %v", took)
	if took >= tunnel.DirectDialTimeout {
		t.Fatalf("took %v: the dialer tried the direct address first", took)
	}
}

// TestTunnelSlowConsumerThroughRelayBounded: a service that reads nothing
// behind a relayed tunnel holds back its writer across all three hops: the
// connecting side buffers at most its window, the exposing side at most
// its window, and the relay between them stops carrying bytes long before
// the writer's data is through (what it carries meanwhile is the window
// plus the socket and muxer buffers on the way, not the data).
func TestTunnelSlowConsumerThroughRelayBounded(t *testing.T) {
	const window = 256 << 10
	c := attachConfig(t, config.RoleSupernode, "")
	c.Capacity = 2
	c.RelayCircuitData = 256 << 20 // the relay must not cut the circuit here
	sn := startNode(t, c)
	ac := attachConfig(t, config.RoleOrdinary, p2pAddr(sn))
	ac.TunnelWindow = window
	a := startClientConfig(t, ac, WithReachability(network.ReachabilityPrivate))
	bc := attachConfig(t, config.RoleOrdinary, p2pAddr(sn))
	bc.TunnelWindow = window
	b := startClientConfig(t, bc)
	waitFor(t, 10*time.Second, "A reserved", func() bool { return reservedOn(a) == sn.ID() })
	waitFor(t, 10*time.Second, "B attached", func() bool { return b.attachmentForTest() != "" })

	// The service accepts and then reads nothing until the gate opens.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	gate := make(chan struct{})
	got := make(chan int64, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		<-gate
		n, _ := io.Copy(io.Discard, s)
		got <- n
	}()
	if _, err := a.Tunnels().Expose("sink", ln.Addr().String(), []peer.ID{b.ID()}, false); err != nil {
		t.Fatal(err)
	}
	tc, err := b.Tunnels().Connect(t.Context(), a.ID(), "sink", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", tc.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const total = 64 << 20
	werr := make(chan error, 1)
	go func() {
		chunk := make([]byte, 64<<10)
		for off := 0; off < total; off += len(chunk) {
			if _, err := conn.Write(chunk); err != nil {
				werr <- err
				return
			}
		}
		werr <- conn.(*net.TCPConn).CloseWrite()
	}()
	relayed := func() float64 { return counter(t, sn, "overlayd_relay_bytes_total", "", "") }
	waitFor(t, 20*time.Second, "the connecting side's window fills (relayed)", func() bool {
		l := b.Tunnels().List().Connects
		return len(l) == 1 && len(l[0].Conns) == 1 && l[0].Conns[0].Buffered == window && l[0].Conns[0].Path == "relayed"
	})
	// The relay stops carrying bytes: two readings 200 ms apart agree.
	var plateau float64
	waitFor(t, 20*time.Second, "the relay stops carrying bytes", func() bool {
		before := relayed()
		time.Sleep(200 * time.Millisecond) // the interval of a rate reading, not synchronisation
		plateau = relayed()
		return plateau == before
	})
	if plateau >= total/4 {
		t.Fatalf("the relay carried %.0f bytes of %d while the service read nothing", plateau, total)
	}
	t.Logf("while the service read nothing: the relay carried %.1f MiB of %d MiB; window %d KiB", plateau/(1<<20), total>>20, window>>10)
	var held []localapi.TunnelConn
	for _, l := range b.Tunnels().List().Connects {
		held = append(held, l.Conns...)
	}
	for _, l := range a.Tunnels().List().Exposed {
		held = append(held, l.Conns...)
	}
	if len(held) != 2 {
		t.Fatalf("%d tunnel connections listed on the two sides, want 2", len(held))
	}
	for _, cn := range held {
		if cn.MaxBuffered > window {
			t.Errorf("a side held %d bytes, window %d", cn.MaxBuffered, window)
		}
	}
	close(gate)
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if n != total {
			t.Fatalf("the service received %d bytes, want %d", n, total)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the service did not receive everything")
	}
}
