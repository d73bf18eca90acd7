package fanout

import (
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// benchMembers is the size of the largest groups Discord reported
// (/r/Overwatch, 30,000 concurrent members).
const benchMembers = 30000

// benchMessage is a small protobuf message with a 150-byte payload.
func benchMessage() proto.Message {
	p := make([]byte, 150)
	for i := range p {
		p[i] = byte(i)
	}
	return wrapperspb.Bytes(p)
}

// encodeFrame encodes m as a varint-length-prefixed frame, in one
// allocation: the work a sender does per encoded message.
func encodeFrame(tb testing.TB, m proto.Message) []byte {
	n := proto.Size(m)
	b := make([]byte, 0, protowire.SizeVarint(uint64(n))+n)
	b = protowire.AppendVarint(b, uint64(n))
	b, err := proto.MarshalOptions{}.MarshalAppend(b, m)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func countSinks(n int) []*countSink {
	s := make([]*countSink, n)
	for i := range s {
		s[i] = &countSink{}
	}
	return s
}

// checkCounted verifies that every sink got every frame.
func checkCounted(b *testing.B, sinks []*countSink, frames int64, frameLen int) {
	b.Helper()
	for i, s := range sinks {
		if s.frames != frames || s.bytes != frames*int64(frameLen) {
			b.Fatalf("sink %d: %d frames, %d bytes; want %d frames of %d bytes", i, s.frames, s.bytes, frames, frameLen)
		}
	}
}

func reportMs(b *testing.B) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/op")
}

// BenchmarkFanout30k: one message, encoded once, offered to 30,000 members
// whose sinks count bytes in memory, through the engine with one worker per
// GOMAXPROCS; timed until the done callback reports all 30,000 Offers.
// submit-us/op is the time spent inside Fanout, what the group's owner waits.
func BenchmarkFanout30k(b *testing.B) { benchFanout30k(b) }

// BenchmarkFanout30kNoYield is BenchmarkFanout30k with WithYieldEvery(0).
func BenchmarkFanout30kNoYield(b *testing.B) { benchFanout30k(b, WithYieldEvery(0)) }

func benchFanout30k(b *testing.B, opts ...Option) {
	e, err := New(0, opts...)
	if err != nil {
		b.Fatal(err)
	}
	e.Start()
	defer e.Close()
	g := e.NewGroup()
	sinks := countSinks(benchMembers)
	for i, s := range sinks {
		g.Add(fmt.Sprintf("12D3KooW%012d", i), s)
	}
	m := benchMessage()
	ch := make(chan Result, 1)
	done := func(r Result) { ch <- r }
	var (
		ops      int64
		frameLen int
		submit   time.Duration // inside Fanout: what the group's owner waits
	)
	b.ReportAllocs()
	for b.Loop() {
		frame := encodeFrame(b, m)
		frameLen = len(frame)
		start := time.Now()
		if err := e.Fanout(g, frame, done); err != nil {
			b.Fatal(err)
		}
		submit += time.Since(start)
		if r := <-ch; r.Delivered != benchMembers {
			b.Fatalf("delivered %d", r.Delivered)
		}
		ops++
	}
	reportMs(b)
	b.ReportMetric(float64(submit.Nanoseconds())/1e3/float64(b.N), "submit-us/op")
	checkCounted(b, sinks, ops, frameLen)
}

// BenchmarkNaive30k: the naive way, for comparison in the same run: for each
// member one after another, encode the message and hand it to the member's
// sink, all on the calling goroutine.
func BenchmarkNaive30k(b *testing.B) {
	sinks := countSinks(benchMembers)
	m := benchMessage()
	var ops int64
	var frameLen int
	b.ReportAllocs()
	for b.Loop() {
		for _, s := range sinks {
			frame := encodeFrame(b, m)
			frameLen = len(frame)
			s.Offer(frame)
		}
		ops++
	}
	reportMs(b)
	checkCounted(b, sinks, ops, frameLen)
}

// BenchmarkSerialOnce30k separates the two effects: encode once, then offer
// to every member one after another on the calling goroutine (no engine).
func BenchmarkSerialOnce30k(b *testing.B) {
	sinks := countSinks(benchMembers)
	members := make([]Sink, len(sinks)) // called through the interface, as the engine does
	for i, s := range sinks {
		members[i] = s
	}
	m := benchMessage()
	var ops int64
	var frameLen int
	b.ReportAllocs()
	for b.Loop() {
		frame := encodeFrame(b, m)
		frameLen = len(frame)
		for _, s := range members {
			s.Offer(frame)
		}
		ops++
	}
	reportMs(b)
	checkCounted(b, sinks, ops, frameLen)
}

// countingWriter counts Writes from many writer goroutines and signals when
// the count reaches target.
type countingWriter struct {
	n, target atomic.Int64
	reached   chan struct{}
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.n.Add(1) == w.target.Load() {
		w.reached <- struct{}{}
	}
	return len(p), nil
}

// startOutboxes starts n Outboxes (limit 16) writing to one countingWriter,
// closed at cleanup. With a pool (mode holds WithWriters) they have no
// goroutine of their own.
func startOutboxes(b *testing.B, n int, mode ...OutboxOption) ([]*Outbox, *countingWriter) {
	w := &countingWriter{reached: make(chan struct{}, 1)}
	boxes := make([]*Outbox, n)
	for i := range boxes {
		o, err := NewOutbox(16, w, mode...)
		if err != nil {
			b.Fatal(err)
		}
		o.Start()
		boxes[i] = o
	}
	b.Cleanup(func() {
		for _, o := range boxes {
			o.Close()
		}
	})
	return boxes, w
}

// benchPool returns a started pool of GOMAXPROCS goroutines (the
// supernode's), closed at cleanup after the Outboxes.
func benchPool(b *testing.B) []OutboxOption {
	p, err := NewWriters(0)
	if err != nil {
		b.Fatal(err)
	}
	p.Start()
	b.Cleanup(p.Close)
	return []OutboxOption{WithWriters(p)}
}

// BenchmarkFanout30kOutbox is the production shape end to end: 30,000
// members, each an Outbox (limit 16) with its own writer goroutine (the
// design before the pool), timed until all 30,000 frames are written (to a
// counter; no syscalls). offered-ms/op is the time until the done callback,
// when every Offer has been made. Setup starts the 30,000 writer goroutines.
func BenchmarkFanout30kOutbox(b *testing.B) { benchFanout30kOutbox(b, nil) }

// BenchmarkFanout30kOutboxPool is BenchmarkFanout30kOutbox with the
// Outboxes written by one shared pool of GOMAXPROCS goroutines (Writers):
// what the supernode runs.
func BenchmarkFanout30kOutboxPool(b *testing.B) { benchFanout30kOutbox(b, benchPool(b)) }

// BenchmarkFanout30kOutboxNoYield is BenchmarkFanout30kOutbox with
// WithYieldEvery(0).
func BenchmarkFanout30kOutboxNoYield(b *testing.B) { benchFanout30kOutbox(b, nil, WithYieldEvery(0)) }

// BenchmarkFanout30kOutboxPoolNoYield is BenchmarkFanout30kOutboxPool with
// WithYieldEvery(0).
func BenchmarkFanout30kOutboxPoolNoYield(b *testing.B) {
	benchFanout30kOutbox(b, benchPool(b), WithYieldEvery(0))
}

func benchFanout30kOutbox(b *testing.B, mode []OutboxOption, opts ...Option) {
	e, err := New(0, opts...)
	if err != nil {
		b.Fatal(err)
	}
	e.Start()
	defer e.Close()
	g := e.NewGroup()
	boxes, w := startOutboxes(b, benchMembers, mode...)
	for i, o := range boxes {
		g.Add(fmt.Sprintf("12D3KooW%012d", i), o)
	}
	m := benchMessage()
	ch := make(chan Result, 1)
	done := func(r Result) { ch <- r }
	var (
		target          int64
		submit, offered time.Duration
	)
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		target += benchMembers
		w.target.Store(target)
		frame := encodeFrame(b, m)
		start := time.Now()
		if err := e.Fanout(g, frame, done); err != nil {
			b.Fatal(err)
		}
		submit += time.Since(start)
		if r := <-ch; r.Delivered != benchMembers {
			b.Fatalf("delivered %d, dropped %d", r.Delivered, r.Dropped)
		}
		offered += time.Since(start)
		<-w.reached
	}
	reportCPU(b, cpu)
	reportMs(b)
	b.ReportMetric(float64(offered.Nanoseconds())/1e6/float64(b.N), "offered-ms/op")
	b.ReportMetric(float64(submit.Nanoseconds())/1e3/float64(b.N), "submit-us/op")
}

// reportCPU reports the process's CPU time per op since cpu (processCPU),
// on all cores together: less sensitive than ms/op to other processes
// competing for the cores, though not to their effect on the caches.
func reportCPU(b *testing.B, cpu int64) {
	if cpu == 0 {
		return
	}
	b.ReportMetric(float64(processCPU()-cpu)/1e6/float64(b.N), "cpu-ms/op")
}

// BenchmarkSerialOnce30kOutbox is BenchmarkFanout30kOutbox without the
// engine: encode once, then Offer to the 30,000 Outboxes one after another on
// the calling goroutine.
func BenchmarkSerialOnce30kOutbox(b *testing.B) { benchSerialOnce30kOutbox(b, nil) }

// BenchmarkSerialOnce30kOutboxPool is BenchmarkSerialOnce30kOutbox with the
// pool.
func BenchmarkSerialOnce30kOutboxPool(b *testing.B) { benchSerialOnce30kOutbox(b, benchPool(b)) }

func benchSerialOnce30kOutbox(b *testing.B, mode []OutboxOption) {
	boxes, w := startOutboxes(b, benchMembers, mode...)
	members := make([]Sink, len(boxes))
	for i, o := range boxes {
		members[i] = o
	}
	m := benchMessage()
	var (
		target  int64
		offered time.Duration
	)
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		target += benchMembers
		w.target.Store(target)
		frame := encodeFrame(b, m)
		start := time.Now()
		for _, s := range members {
			if !s.Offer(frame) {
				b.Fatal("dropped")
			}
		}
		offered += time.Since(start)
		<-w.reached
	}
	reportCPU(b, cpu)
	reportMs(b)
	b.ReportMetric(float64(offered.Nanoseconds())/1e6/float64(b.N), "offered-ms/op")
}

// BenchmarkOutboxOfferDrain: one Outbox (limit 1024), 160-byte frames
// offered as fast as it accepts them (the producer yields when it is full)
// and drained by its writer into a counter; timed until all are written.
// writes/frame is the number of Write calls per frame: 1 without
// coalescing.
func BenchmarkOutboxOfferDrain(b *testing.B) {
	b.Run("coalesced", func(b *testing.B) { benchOfferDrain(b) })
	b.Run("per-frame", func(b *testing.B) { benchOfferDrain(b, WithCoalesce(0)) })
	b.Run("pool-coalesced", func(b *testing.B) { benchOfferDrain(b, benchPool(b)...) })
	b.Run("pool-per-frame", func(b *testing.B) { benchOfferDrain(b, append(benchPool(b), WithCoalesce(0))...) })
}

func benchOfferDrain(b *testing.B, opts ...OutboxOption) {
	w := &byteCountingWriter{reached: make(chan struct{}, 1)}
	o, err := NewOutbox(1024, w, opts...)
	if err != nil {
		b.Fatal(err)
	}
	o.Start()
	defer o.Close()
	const frameLen = 160
	frame := make([]byte, frameLen)
	w.target.Store(int64(b.N) * frameLen)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for !o.Offer(frame) {
			runtime.Gosched()
		}
	}
	<-w.reached
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
	b.ReportMetric(float64(w.writes.Load())/float64(b.N), "writes/frame")
}

// byteCountingWriter counts bytes and Writes and signals when the bytes
// reach target.
type byteCountingWriter struct {
	n, target, writes atomic.Int64
	reached           chan struct{}
}

func (w *byteCountingWriter) Write(p []byte) (int, error) {
	w.writes.Add(1)
	if w.n.Add(int64(len(p))) == w.target.Load() {
		w.reached <- struct{}{}
	}
	return len(p), nil
}

// BenchmarkOutboxOfferFull: the drop path, an Offer to a full Outbox.
func BenchmarkOutboxOfferFull(b *testing.B) {
	o, err := NewOutbox(1, &countingWriter{})
	if err != nil {
		b.Fatal(err)
	}
	frame := make([]byte, 160)
	o.Offer(frame) // not started: stays full
	b.ReportAllocs()
	for b.Loop() {
		if o.Offer(frame) {
			b.Fatal("accepted")
		}
	}
}

// BenchmarkGroupBuild30k adds 30,000 members to an empty group.
func BenchmarkGroupBuild30k(b *testing.B) {
	e, err := New(0)
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, benchMembers)
	for i := range ids {
		ids[i] = fmt.Sprintf("12D3KooW%012d", i)
	}
	s := &countSink{}
	b.ReportAllocs()
	for b.Loop() {
		g := e.NewGroup()
		for _, id := range ids {
			g.Add(id, s)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchMembers, "ns/member")
}

// BenchmarkGroupRemoveAdd30k removes one member of a 30,000-member group and
// adds it back: Remove copies that member's worker partition.
func BenchmarkGroupRemoveAdd30k(b *testing.B) {
	e, err := New(0)
	if err != nil {
		b.Fatal(err)
	}
	g := e.NewGroup()
	s := &countSink{}
	for i := range benchMembers {
		g.Add(fmt.Sprintf("12D3KooW%012d", i), s)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		id := fmt.Sprintf("12D3KooW%012d", i%benchMembers)
		g.Remove(id)
		g.Add(id, s)
		i += 7919
	}
}

// BenchmarkOutboxOfferDrainPipe is BenchmarkOutboxOfferDrain with the
// Outbox writing to a real OS pipe drained by a reader goroutine, so that
// each Write is a write(2): what coalescing saves in system calls.
func BenchmarkOutboxOfferDrainPipe(b *testing.B) {
	open := func(b *testing.B) (io.Writer, io.Reader) {
		r, w, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { r.Close(); w.Close() })
		return w, r
	}
	b.Run("coalesced", func(b *testing.B) { benchOfferDrainOS(b, open) })
	b.Run("per-frame", func(b *testing.B) { benchOfferDrainOS(b, open, WithCoalesce(0)) })
}

// BenchmarkOutboxOfferDrainTCP is BenchmarkOutboxOfferDrainPipe over a
// loopback TCP connection.
func BenchmarkOutboxOfferDrainTCP(b *testing.B) {
	open := func(b *testing.B) (io.Writer, io.Reader) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}()
		w, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		r, ok := <-accepted
		if !ok {
			b.Fatal("accept failed")
		}
		b.Cleanup(func() { r.Close(); w.Close() })
		return w, r
	}
	b.Run("coalesced", func(b *testing.B) { benchOfferDrainOS(b, open) })
	b.Run("per-frame", func(b *testing.B) { benchOfferDrainOS(b, open, WithCoalesce(0)) })
}

// benchOfferDrainOS offers b.N 160-byte frames to one Outbox (limit 1024)
// writing to the writer open returns, timed until the reader has read them
// all. writes/frame counts the Write calls (system calls) per frame.
func benchOfferDrainOS(b *testing.B, open func(*testing.B) (io.Writer, io.Reader), opts ...OutboxOption) {
	w, r := open(b)
	cw := &callCountingWriter{w: w}
	o, err := NewOutbox(1024, cw, opts...)
	if err != nil {
		b.Fatal(err)
	}
	o.Start()
	defer o.Close()
	const frameLen = 160
	frame := make([]byte, frameLen)
	total := int64(b.N) * frameLen
	read := make(chan error, 1)
	go func() {
		buf := make([]byte, 64<<10)
		var n int64
		for n < total {
			k, err := r.Read(buf)
			n += int64(k)
			if err != nil {
				read <- err
				return
			}
		}
		read <- nil
	}()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for !o.Offer(frame) {
			runtime.Gosched()
		}
	}
	if err := <-read; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
	b.ReportMetric(float64(cw.calls.Load())/float64(b.N), "writes/frame")
}

// callCountingWriter counts the Write calls it passes on.
type callCountingWriter struct {
	w     io.Writer
	calls atomic.Int64
}

func (c *callCountingWriter) Write(p []byte) (int, error) {
	c.calls.Add(1)
	return c.w.Write(p)
}
