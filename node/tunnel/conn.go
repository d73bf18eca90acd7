package tunnel

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/multiformats/go-varint"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// conn is one tunnel connection, on either side: a local TCP connection
// and the tunnel stream that carries it (replaced when it migrates).
//
// Each direction is a byte stream numbered from 0. The sending side reads
// its TCP connection into a ring of window bytes and keeps every byte until
// the peer acknowledges it, so it never holds more than the window and the
// TCP reader stops (backpressure) when the ring is full. A receiver
// acknowledges bytes once it wrote them to its TCP connection: a slow
// reader there holds the acknowledgements back and with them the sender.
// The close-write (TCP FIN) counts as one more byte. Data frames carry
// their offset, so a resume on a new stream resends from the peer's
// received offset and the receiver drops what it already had.
type conn struct {
	m         *Manager
	id        [protocol.TunnelIDLen]byte
	peer      peer.ID
	tcp       net.Conn
	win       uint64
	connector bool               // the connecting side (drives migration)
	owner     *counts            // the service's or the connect's counters
	set       map[*conn]struct{} // the owner's connections (under m.mu)
	cc        *connect           // the connect, on the connecting side
	service   string
	since     time.Time

	mu   sync.Mutex
	cond *sync.Cond
	// Send side: bytes [acked, read) are in ring, unacknowledged.
	ring      []byte
	acked     uint64
	read      uint64
	sent      uint64 // next offset to send on the current stream
	finRead   bool   // the local TCP side ended
	finSent   bool
	finAcked  bool
	maxBuffer uint64
	// Receive side: recv bytes were written to the local TCP connection.
	wmu       sync.Mutex // serialises writes to tcp (old and new stream readers)
	recv      uint64
	finRecv   bool
	ackSent   uint64
	ackNeeded bool
	// The stream.
	s           network.Stream
	gen         int
	limited     bool
	broken      bool // the current stream failed; waiting for a resume
	recovering  bool // the connecting side is opening a new stream
	recircuited bool // it resumed once on a new relayed circuit
	migrations  int
	relayedAt   time.Time // when the current stream went over a relay
	relayedOut  uint64    // sent, at relayedAt
	relayedIn   uint64    // recv, at relayedAt
	brokenAt    time.Time // when the current stream failed
	done        bool
	err         error
	lastActive  time.Time
}

func newConn(m *Manager, id [protocol.TunnelIDLen]byte, p peer.ID, tcp net.Conn, connector bool, owner *counts, set map[*conn]struct{}, service string) *conn {
	c := &conn{m: m, id: id, peer: p, tcp: tcp, win: uint64(m.cfg.Window), connector: connector, owner: owner, set: set, service: service,
		ring: make([]byte, m.cfg.Window), since: m.now(), lastActive: m.now()}
	c.cond = sync.NewCond(&c.mu)
	return c
}

func (c *conn) idString() string { return hex.EncodeToString(c.id[:]) }

// ackValueLocked is what this side acknowledges: bytes received, +1 once
// the peer's close-write was applied.
func (c *conn) ackValueLocked() uint64 {
	if c.finRecv {
		return c.recv + 1
	}
	return c.recv
}

// attach makes s the connection's stream; peerRecv is the peer's received
// offset (0 on a new connection), from which this side resends. Frames of
// the old stream still in flight are harmless: receivers drop bytes they
// already have.
func (c *conn) attach(s network.Stream, peerRecv uint64) error {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		s.Reset()
		return errors.New("connection closed")
	}
	bytes, finAck, err := c.resumePointLocked(peerRecv)
	if err != nil {
		c.mu.Unlock()
		s.Reset()
		return err
	}
	old := c.s
	moved := c.gen > 0
	c.s, c.gen = s, c.gen+1
	g := c.gen
	c.acked, c.sent = bytes, bytes
	c.finAcked = c.finAcked || finAck
	c.finSent = c.finAcked
	c.ackNeeded = moved
	c.broken, c.recovering = false, false
	c.limited = s.Conn().Stat().Limited
	if c.limited {
		c.relayedAt, c.relayedOut, c.relayedIn = c.m.now(), c.sent, c.recv
	}
	recvAt := c.recv
	if moved {
		c.migrations++
		c.owner.migrations.Add(1)
		c.m.met.migrations.Inc()
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	if old != nil {
		old.Reset()
	}
	if moved {
		c.m.log.Info("tunnel connection moved", "id", c.idString(), "remote", c.peer.ShortString(),
			"path", pathOf(s.Conn().Stat().Limited), "received", recvAt, "peer_received", peerRecv)
	}
	c.m.goConn(func() { c.writeLoop(g, s) })
	c.m.goConn(func() { c.readLoop(g, s) })
	return nil
}

// resumePointLocked returns the offset to resend from when the peer says
// it received peerRecv (+1 for the close-write), and whether that
// includes the close-write. A peerRecv below what the peer acknowledged
// since (it was read before later acknowledgements) resends from the
// acknowledged offset; above what this side read is a broken peer.
func (c *conn) resumePointLocked(peerRecv uint64) (uint64, bool, error) {
	bytes, finAck := peerRecv, false
	if c.finRead && peerRecv == c.read+1 {
		bytes, finAck = c.read, true
	}
	if bytes > c.read {
		return 0, false, fmt.Errorf("resume at %d: this side read only %d", peerRecv, c.read)
	}
	if bytes < c.acked {
		bytes, finAck = c.acked, c.finAcked
	}
	return bytes, finAck, nil
}

// canResume checks a resume's offset before it is answered.
func (c *conn) canResume(peerRecv uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return errors.New("connection closed")
	}
	_, _, err := c.resumePointLocked(peerRecv)
	return err
}

func pathOf(limited bool) string {
	if limited {
		return "relayed"
	}
	return "direct"
}

// tcpLoop reads the local TCP connection into the ring while the window
// has room.
func (c *conn) tcpLoop() {
	for {
		c.mu.Lock()
		for !c.done && c.read-c.acked >= c.win {
			c.cond.Wait()
		}
		if c.done {
			c.mu.Unlock()
			return
		}
		start := c.read % c.win
		n := min(c.win-(c.read-c.acked), c.win-start)
		buf := c.ring[start : start+n]
		c.mu.Unlock()
		// The bytes [read, acked+win) of the ring are free: only this
		// goroutine writes them, and acked only grows.
		k, err := c.tcp.Read(buf)
		c.mu.Lock()
		if k > 0 {
			c.read += uint64(k)
			c.maxBuffer = max(c.maxBuffer, c.read-c.acked)
			c.lastActive = c.m.now()
			c.cond.Broadcast()
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				c.finRead = true
				c.cond.Broadcast()
				c.mu.Unlock()
				return
			}
			c.mu.Unlock()
			c.abort(fmt.Errorf("local connection: %w", err), true)
			return
		}
		c.mu.Unlock()
	}
}

// writeLoop sends data, close-write and acknowledgements on stream
// generation g until the connection ends or moves to another stream.
func (c *conn) writeLoop(g int, s network.Stream) {
	var f protocol.TunnelFrameView
	out := make([]byte, 0, protocol.MaxTunnelFrame)
	for {
		c.mu.Lock()
		for !c.done && c.gen == g && !(c.sent < c.read || (c.finRead && !c.finSent) || c.ackNeeded) {
			c.cond.Wait()
		}
		if c.done || c.gen != g {
			c.mu.Unlock()
			return
		}
		// The peer may have acknowledged more than this stream sent (on
		// the stream before a resume): those bytes are gone from the ring.
		c.sent = max(c.sent, c.acked)
		f = protocol.TunnelFrameView{Offset: c.sent}
		var d1, d2 []byte
		if c.sent < c.read {
			n := min(c.read-c.sent, protocol.MaxTunnelData)
			start := c.sent % c.win
			first := min(n, c.win-start)
			d1, d2 = c.ring[start:start+first], c.ring[:n-first]
			c.sent += n
		}
		if c.finRead && c.sent == c.read && !c.finSent {
			f.CloseWrite, c.finSent = true, true
		}
		f.Ack, c.ackSent, c.ackNeeded = c.ackValueLocked(), c.ackValueLocked(), false
		// Copied under the lock: [sent, read) stays in the ring until
		// acknowledged, and the TCP reader writes only past read.
		out = protocol.AppendTunnelFrame(out[:0], &f, d1, d2)
		c.mu.Unlock()
		if _, err := s.Write(out); err != nil {
			c.streamFailed(g, fmt.Errorf("write: %w", err))
			return
		}
		if n := len(d1) + len(d2); n > 0 {
			c.owner.bytesOut.Add(uint64(n))
			c.m.met.bytesOut.Add(float64(n))
		}
		c.mu.Lock()
		finished := c.finishedLocked()
		c.mu.Unlock()
		if finished {
			c.finish()
			return
		}
	}
}

// finishedLocked reports whether both directions ended and each side knows
// it: this side's close-write was acknowledged, the peer's was applied and
// acknowledged.
func (c *conn) finishedLocked() bool {
	return !c.done && c.finAcked && c.finRecv && c.ackSent == c.recv+1
}

// readLoop applies the peer's frames of stream generation g.
func (c *conn) readLoop(g int, s network.Stream) {
	fr := protocol.NewTunnelFrameReader(s)
	var f protocol.TunnelFrameView
	for {
		err := fr.Read(&f)
		if err == nil {
			err = protocol.CheckTunnelFrameView(&f)
		}
		if err != nil {
			if protocol.ReasonOf(err) != "" {
				c.m.met.rejected.Inc()
				c.abort(fmt.Errorf("bad frame from peer: %w", err), true)
				return
			}
			c.streamFailed(g, fmt.Errorf("read: %w", err))
			return
		}
		if f.Reset {
			c.abort(fmt.Errorf("peer reset the connection: %s", f.Reason), false)
			return
		}
		if a := f.Ack; a > 0 {
			if err := c.onAck(a); err != nil {
				c.abort(err, true)
				return
			}
		}
		if len(f.Data) > 0 || f.CloseWrite {
			if err := c.onData(f.Offset, f.Data, f.CloseWrite); err != nil {
				c.abort(err, true)
				return
			}
		}
		c.mu.Lock()
		finished := c.finishedLocked()
		stale := c.gen != g || c.done
		c.mu.Unlock()
		if finished {
			c.finish()
		}
		if stale && !finished {
			return
		}
	}
}

// onAck applies a cumulative acknowledgement.
func (c *conn) onAck(a uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	bytes := a
	if c.finSent && a == c.read+1 {
		bytes = c.read
		c.finAcked = true
	}
	if bytes > c.sent && bytes > c.read {
		return fmt.Errorf("peer acknowledged %d bytes of %d sent", a, c.read)
	}
	if bytes > c.acked {
		c.acked = bytes
		c.cond.Broadcast()
	}
	return nil
}

// onData writes the new part of a data frame to the local connection.
func (c *conn) onData(off uint64, data []byte, closeWrite bool) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	end := off + uint64(len(data))
	c.mu.Lock()
	recv, finRecv := c.recv, c.finRecv
	if end > recv {
		// Active from the data's arrival, stamped before it is written
		// on: stamped after, whoever read it could see the connection
		// idle since before (TestTunnelIdleTimeout, under load).
		c.lastActive = c.m.now()
	}
	c.mu.Unlock()
	if off > recv {
		return fmt.Errorf("peer sent offset %d, have %d: a gap", off, recv)
	}
	if finRecv && end > recv {
		return errors.New("peer sent data after its close-write")
	}
	if end > recv {
		if _, err := c.tcp.Write(data[recv-off:]); err != nil {
			return fmt.Errorf("local connection: %w", err)
		}
		c.owner.bytesIn.Add(end - recv)
		c.m.met.bytesIn.Add(float64(end - recv))
	}
	c.mu.Lock()
	if end > c.recv {
		c.recv = end
		// Every MaxTunnelData bytes: the peer's window (its own setting,
		// at least MinWindow = 4 × MaxTunnelData) never waits on an
		// acknowledgement this side holds back.
		if c.recv-c.ackSent >= protocol.MaxTunnelData {
			c.ackNeeded = true
			c.cond.Broadcast()
		}
	}
	apply := closeWrite && end == c.recv && !c.finRecv
	c.mu.Unlock()
	if apply {
		if cw, ok := c.tcp.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		c.mu.Lock()
		c.finRecv, c.ackNeeded = true, true
		c.cond.Broadcast()
		c.mu.Unlock()
	}
	return nil
}

// streamFailed handles the failure of stream generation g: the connecting
// side opens a new stream (Manager.recover), the exposing side waits for
// one up to the resume grace.
func (c *conn) streamFailed(g int, err error) {
	c.mu.Lock()
	if c.done || c.gen != g || c.broken {
		c.mu.Unlock()
		return
	}
	if c.finishedLocked() {
		c.mu.Unlock()
		c.finish()
		return
	}
	c.broken, c.brokenAt = true, c.m.now()
	s := c.s
	limited := c.limited
	start := !c.recovering && c.connector
	if start {
		c.recovering = true
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	s.Reset()
	c.m.log.Debug("tunnel stream failed", "id", c.idString(), "path", pathOf(limited), "err", err)
	if start {
		c.m.goConn(func() { c.m.recoverConn(c, err) })
	} else if !c.connector {
		c.m.awaitResume(c, g)
	}
}

// resetWriteTimeout bounds the write of a reset frame.
const resetWriteTimeout = 500 * time.Millisecond

// abort ends the connection: both TCP connections close. With tell, the
// peer is sent a reset frame first (best effort).
func (c *conn) abort(err error, tell bool) {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return
	}
	c.done, c.err = true, err
	s, broken := c.s, c.broken
	c.cond.Broadcast()
	c.mu.Unlock()
	if c.cc != nil {
		c.cc.fail(err) // before the local connection closes: a client that sees it closed can ask why
	}
	if s != nil {
		if tell && !broken {
			_ = s.SetWriteDeadline(time.Now().Add(resetWriteTimeout))
			_ = protocol.WriteFrame(s, &pb.TunnelFrame{Reset_: true, Reason: protocol.ShortDetail(err.Error())})
			_ = s.Close()
		} else {
			s.Reset()
		}
	}
	_ = c.tcp.Close()
	c.m.connEnded(c, err)
}

// finish ends a connection whose both directions completed.
func (c *conn) finish() {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return
	}
	c.done = true
	s := c.s
	c.cond.Broadcast()
	c.mu.Unlock()
	if s != nil {
		// A graceful close: the last acknowledgement is delivered.
		_ = s.Close()
	}
	_ = c.tcp.Close()
	c.m.connEnded(c, nil)
}

// info describes the connection for the listing.
func (c *conn) info() localapi.TunnelConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	path := pathOf(c.limited)
	if c.broken || c.s == nil {
		path = "moving"
	}
	return localapi.TunnelConn{
		ID: c.idString(), Peer: c.peer.String(), Path: path, Since: c.since,
		BytesIn: c.recv, BytesOut: c.acked, Migration: c.migrations,
		Buffered: int(c.read - c.acked), MaxBuffered: int(c.maxBuffer),
	}
}

// readOpen reads a TunnelOpen or TunnelOpenResponse without reading
// ahead: the frames that follow an answer belong to the data reader.
func readOpen(r io.Reader, m proto.Message) error {
	n, err := varint.ReadUvarint(byteReader{r})
	if err != nil {
		if errors.Is(err, varint.ErrOverflow) || errors.Is(err, varint.ErrNotMinimal) {
			return protocol.Reject(protocol.ReasonUndecodable, "frame length: %v", err)
		}
		return err
	}
	if n > protocol.MaxTunnelOpenFrame {
		return &protocol.RejectError{Reason: protocol.ReasonOversize,
			Err: fmt.Errorf("%w: %d bytes, limit %d", protocol.ErrFrameTooLarge, n, protocol.MaxTunnelOpenFrame)}
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return protocol.Reject(protocol.ReasonUndecodable, "frame: %v", err)
	}
	return nil
}

// byteReader reads one byte at a time from r.
type byteReader struct{ r io.Reader }

func (b byteReader) ReadByte() (byte, error) {
	var x [1]byte
	_, err := io.ReadFull(b.r, x[:])
	return x[0], err
}
