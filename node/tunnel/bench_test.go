package tunnel

import (
	"context"
	"io"
	"net"
	"testing"

	"github.com/libp2p/go-libp2p/core/network"
)

// BenchmarkThroughput moves 16 MiB one way per op, on loopback: over a
// plain TCP connection (the physical limit), over a bare libp2p stream
// (TLS + yamux, what a tunnel rides on), and through a tunnel (both TCP
// legs, the frames, the window). -short moves 1 MiB.
func BenchmarkThroughput(b *testing.B) {
	size := 16 << 20
	if testing.Short() {
		size = 1 << 20
	}
	chunk := randomBytes(64 << 10)
	send := func(b *testing.B, w io.Writer, closeWrite func() error) {
		for off := 0; off < size; off += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
		if err := closeWrite(); err != nil {
			b.Fatal(err)
		}
	}
	// sink counts what a connection delivers, then answers one byte.
	sink := func(c io.ReadWriteCloser) {
		defer c.Close()
		_, _ = io.Copy(io.Discard, c)
		_, _ = c.Write([]byte{1})
	}
	sinkServer := func(b *testing.B) net.Listener {
		ln := listen(b)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go sink(c)
			}
		}()
		return ln
	}
	run := func(b *testing.B, open func() (io.ReadWriter, func() error)) {
		b.SetBytes(int64(size))
		b.ReportAllocs()
		for b.Loop() {
			c, cw := open()
			send(b, c, cw)
			if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("tcp", func(b *testing.B) {
		ln := sinkServer(b)
		run(b, func() (io.ReadWriter, func() error) {
			c := dial(b, ln.Addr().String())
			return c, c.CloseWrite
		})
	})
	b.Run("libp2p-stream", func(b *testing.B) {
		ha, hb := newHost(b), newHost(b)
		connectHosts(b, hb, ha)
		ha.SetStreamHandler("/bench/1", func(s network.Stream) { sink(s) })
		run(b, func() (io.ReadWriter, func() error) {
			s, err := hb.NewStream(context.Background(), ha.ID(), "/bench/1")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s, s.CloseWrite
		})
	})
	b.Run("tunnel", func(b *testing.B) {
		p := newPair(b, Config{})
		ln := sinkServer(b)
		tc := p.expose(b, ln.Addr().String())
		run(b, func() (io.ReadWriter, func() error) {
			c := dial(b, tc.Listen)
			return c, c.CloseWrite
		})
	})
}

// BenchmarkRoundTrip is one 64-byte request and its echo per op on one
// open connection: plain TCP, a bare libp2p stream, a tunnel. The
// difference is the latency a tunnel adds.
func BenchmarkRoundTrip(b *testing.B) {
	msg := randomBytes(64)
	run := func(b *testing.B, c io.ReadWriter) {
		buf := make([]byte, len(msg))
		for b.Loop() {
			if _, err := c.Write(msg); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("tcp", func(b *testing.B) {
		ln := listen(b)
		echoServer(b, ln)
		run(b, dial(b, ln.Addr().String()))
	})
	b.Run("libp2p-stream", func(b *testing.B) {
		ha, hb := newHost(b), newHost(b)
		connectHosts(b, hb, ha)
		ha.SetStreamHandler("/echo/1", func(s network.Stream) { defer s.Close(); _, _ = io.Copy(s, s) })
		s, err := hb.NewStream(context.Background(), ha.ID(), "/echo/1")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		run(b, s)
	})
	b.Run("tunnel", func(b *testing.B) {
		p := newPair(b, Config{})
		ln := listen(b)
		echoServer(b, ln)
		tc := p.expose(b, ln.Addr().String())
		run(b, dial(b, tc.Listen))
	})
}
