package fanout

import (
	"bytes"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
)

// TestOutboxByteLimit: a client that never reads holds at most the byte
// bound of frames, not limit × the largest frame. Before WithByteLimit a
// 1,024-frame outbox of 65 KiB frames held 65 MiB for one stalled client;
// here the bound is 256 KiB, the frames past it are dropped (newest first),
// counted by reason, and told by one gap notice where they are missing.
func TestOutboxByteLimit(t *testing.T) { outboxModes(t, testOutboxByteLimit) }

func testOutboxByteLimit(t *testing.T, mode []OutboxOption) {
	const (
		frameSize = 65 << 10
		byteLimit = 256 << 10
		offered   = 100
	)
	wr := newGateWriter(true)
	var dropFrames, dropBytes atomic.Uint64
	o := newOutbox(t, 1024, wr, append(mode, WithGapFrame(gapFrame), WithAbort(wr.Abort),
		WithByteLimit(byteLimit), WithDropCounters(&dropFrames, &dropBytes))...)
	frame := func(k int) []byte {
		b := bytes.Repeat([]byte{'x'}, frameSize)
		copy(b, fmt.Appendf(nil, "m:%d;", k))
		return b
	}
	o.Start()
	accepted := 0
	for k := range offered {
		if o.Offer(frame(k)) {
			accepted++
		}
		if st := o.Stats(); st.QueuedBytes > byteLimit {
			t.Fatalf("after offer %d: %d bytes queued, bound %d", k, st.QueuedBytes, byteLimit)
		}
	}
	want := byteLimit / frameSize
	if accepted != want {
		t.Fatalf("%d frames accepted, want %d (the byte bound)", accepted, want)
	}
	st := o.Stats()
	if st.Dropped != offered-uint64(want) || st.DroppedBytes != st.Dropped || dropBytes.Load() != st.Dropped || dropFrames.Load() != 0 {
		t.Fatalf("stats %+v, drop counters frames %d bytes %d; want %d dropped at the byte bound", st, dropFrames.Load(), dropBytes.Load(), offered-want)
	}
	wr.open()
	wantGap := string(gapFrame(uint64(offered - want)))
	wr.waitFor(t, "the gap notice", func() bool { return strings.HasSuffix(wr.String(), wantGap) })
	// The counters and the queue are updated just after the last Write
	// returns, which no event of the writer announces.
	waitUntil(t, "the counters", func() bool {
		st := o.Stats()
		return st.Written == uint64(want) && st.Gaps == 1 && st.Queued == 0
	})
	if st := o.Stats(); st.QueuedBytes != 0 || st.Queued != 0 {
		t.Fatalf("after draining: %+v", st)
	}
	// Room again: the next frame is taken.
	if !o.Offer(frame(offered)) {
		t.Fatal("Offer refused with the queue drained")
	}
}

func TestWithByteLimitValidates(t *testing.T) {
	if _, err := NewOutbox(1, &bytes.Buffer{}, WithByteLimit(0)); err == nil {
		t.Fatal("WithByteLimit(0) accepted")
	}
}
