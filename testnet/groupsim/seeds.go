package groupsim

import (
	"runtime"
	"sync"
)

// Seeds runs seeds from, from+1, … from+n-1 with p, parallel at a time
// (0: one per CPU; each seed runs on one goroutine of its own, and a
// seed's run is the same whatever else runs beside it), calling done, if
// not nil, with each result as it finishes (from one goroutine at a
// time). It returns the results in seed order.
func Seeds(from uint64, n, parallel int, p Params, done func(Result)) []Result {
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	out := make([]Result, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(parallel, max(n, 1)) {
		wg.Go(func() {
			for i := range next {
				r := Run(from+uint64(i), p)
				out[i] = r
				if done != nil {
					mu.Lock()
					done(r)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}
