package ring_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/overlayd/overlayd/overlay/ring"
)

// Benchmark sizes: members × DefaultPointsPerWeight points. The peer
// libraries in ../../bench run the same lookups on the same keys.
var benchMembers = []int{100, 2048}

const benchKeys = 1 << 16 // 16-byte keys, cycled: 1 MiB, larger than L2

var benchSink atomic.Int64

func BenchmarkLookup(b *testing.B) {
	for _, n := range benchMembers {
		r := mustNew(b, members(b, 1, n))
		ks := keys(b, 2, benchKeys, 16)
		b.Run(fmt.Sprintf("members=%d/serial", n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_ = r.Lookup(ks[i&(benchKeys-1)])
				i++
			}
		})
		b.Run(fmt.Sprintf("members=%d/parallel", n), func(b *testing.B) {
			b.ReportAllocs()
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i, sum := int(next.Add(7919)), 0
				for pb.Next() {
					sum += len(r.Lookup(ks[i&(benchKeys-1)]))
					i++
				}
				benchSink.Add(int64(sum))
			})
		})
	}
}

func BenchmarkLookupN3(b *testing.B) {
	for _, n := range benchMembers {
		r := mustNew(b, members(b, 1, n))
		ks := keys(b, 2, benchKeys, 16)
		b.Run(fmt.Sprintf("members=%d/serial", n), func(b *testing.B) {
			b.ReportAllocs()
			dst := make([]string, 0, 3)
			i := 0
			for b.Loop() {
				dst = r.LookupN(ks[i&(benchKeys-1)], 3, dst)
				i++
			}
		})
		b.Run(fmt.Sprintf("members=%d/parallel", n), func(b *testing.B) {
			b.ReportAllocs()
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i, sum := int(next.Add(7919)), 0
				dst := make([]string, 0, 3)
				for pb.Next() {
					dst = r.LookupN(ks[i&(benchKeys-1)], 3, dst)
					sum += len(dst)
					i++
				}
				benchSink.Add(int64(sum))
			})
		})
	}
}

// BenchmarkNew measures building a ring (target: < 100 ms at 2048 × 160)
// and reports the heap it keeps, all-in, per point: point arrays, lookup
// table, member copy and the Ring itself (member ID strings are shared with
// the caller and not counted).
func BenchmarkNew(b *testing.B) {
	for _, n := range benchMembers {
		ms := members(b, 1, n)
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			r := mustNew(b, ms)
			runtime.GC()
			runtime.ReadMemStats(&after)
			heap := float64(after.HeapAlloc) - float64(before.HeapAlloc)
			runtime.KeepAlive(r)
			for b.Loop() {
				if _, err := ring.New(ms); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(heap/float64(r.Points()), "heapB/point")
		})
	}
}
