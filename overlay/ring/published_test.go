package ring_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/overlayd/overlayd/overlay/ring"
)

// TestPublishedConcurrent runs readers against a writer that republishes;
// run with -race. Every reader must see a whole ring: an owner that is a
// member of the ring it loaded.
func TestPublishedConcurrent(t *testing.T) {
	var p ring.Published
	if p.Load() != nil {
		t.Fatal("Load() before Publish is not nil")
	}
	rings := make([]*ring.Ring, 6)
	valid := map[*ring.Ring]map[string]bool{}
	for i := range rings {
		ms := members(t, 40+uint64(i), 20+i)
		rings[i] = mustNew(t, ms)
		valid[rings[i]] = ids(ms)
	}
	p.Publish(rings[0])

	const readers = 4
	ks := keys(t, 41, 256, 16)
	var stop atomic.Bool
	var started, done sync.WaitGroup
	started.Add(readers)
	errs := make(chan string, readers)
	for g := range readers {
		done.Go(func() {
			first := true
			defer func() {
				if first { // failed before its first complete read
					started.Done()
				}
			}()
			for i := g; !stop.Load(); i++ {
				r := p.Load()
				k := ks[i%len(ks)]
				if id := r.Lookup(k); !valid[r][id] {
					errs <- "owner " + id + " not in the loaded ring"
					return
				}
				if c := r.LookupN(k, 3, nil); len(c) != 3 || !valid[r][c[2]] {
					errs <- "bad cluster from the loaded ring"
					return
				}
				if first {
					first = false
					started.Done()
				}
			}
		})
	}
	started.Wait()
	for i := range 300 {
		p.Publish(rings[i%len(rings)])
	}
	stop.Store(true)
	done.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if p.Load() != rings[299%len(rings)] {
		t.Error("Load() is not the last published ring")
	}
	p.Publish(nil)
	if p.Load() != nil {
		t.Error("Load() after Publish(nil) is not nil")
	}
}
