package store

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkPutOffline stores 256-byte messages durably. Sequential puts pay
// a commit and fsync each (plus the batch delay); parallel ones share
// commits through db.Batch, which the per-op time shows. The -nodelay
// cases are the alternative without a batch delay: cheaper alone, but
// concurrent puts then queue for one fsync each.
func BenchmarkPutOffline(b *testing.B) {
	lim := Limits{
		MaxBytes:            1 << 40,
		OfflinePerRecipient: Quota{Count: 1 << 30, Bytes: 1 << 40},
		OfflinePerSender:    Quota{Count: 1 << 30, Bytes: 1 << 40},
	}
	data := make([]byte, 256)
	for _, bc := range []struct {
		name     string
		parallel int           // goroutines per GOMAXPROCS; 0 is sequential
		delay    time.Duration // batch delay
	}{
		{"sequential", 0, time.Millisecond},
		{"sequential-nodelay", 0, 0},
		{"parallel", 16, time.Millisecond},
		{"parallel-nodelay", 16, 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ts := openTest(b, lim, WithBatchDelay(bc.delay))
			expires := ts.clock.Now().Add(time.Hour)
			var n atomic.Uint64
			put := func() {
				i := n.Add(1)
				o := Offline{
					Recipient: fmt.Sprintf("recipient-%d", i%64),
					Sender:    fmt.Sprintf("sender-%d", i%16),
					ID:        []byte(fmt.Sprintf("%016x", i)),
					Data:      data,
					Expires:   expires,
				}
				if ok, err := ts.PutOffline(o); !ok || err != nil {
					b.Errorf("PutOffline: %v, %v", ok, err)
				}
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			if bc.parallel == 0 {
				for b.Loop() {
					put()
				}
				return
			}
			b.SetParallelism(bc.parallel)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					put()
				}
			})
		})
	}
}

// BenchmarkAppendReplay appends 256-byte entries to 64 groups; the flusher
// writes behind at the default interval.
func BenchmarkAppendReplay(b *testing.B) {
	ts := openTest(b, Limits{})
	data := make([]byte, 256)
	groups := make([]string, 64)
	for i := range groups {
		groups[i] = fmt.Sprintf("group-%d", i)
	}
	var seq uint64
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		seq++
		if err := ts.AppendReplay(groups[seq%64], Entry{Epoch: 1, Seq: seq, Data: data}); err != nil {
			b.Fatal(err)
		}
	}
}
