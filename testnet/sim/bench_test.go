package sim

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkSkype2010 runs the skype2010 scenario for a simulated minute
// under each of the two main policies and reports events per second of
// wall time and the heap per peer after setup. Under -short it runs 1,000
// clients; otherwise 10,000 (OVERLAYD_SIM_CLIENTS is not read: use the
// command, `overlayd testnet sim`, for other scales).
func BenchmarkSkype2010(b *testing.B) {
	clients := 10000
	if testing.Short() {
		clients = 1000
	}
	for _, pol := range []string{"overlayd", "2010"} {
		b.Run(fmt.Sprintf("policy=%s/clients=%d", pol, clients), func(b *testing.B) {
			var events uint64
			var heap float64
			for b.Loop() {
				b.StopTimer()
				runtime.GC()
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				s := mustSim(b, "skype2010", pol, clients, clients/100, 1, time.Minute)
				runtime.GC()
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				heap = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(clients+clients/100)
				b.StartTimer()
				events += s.Run().Summary.Events
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(heap, "B/peer")
		})
	}
}
