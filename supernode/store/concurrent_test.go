package store

import (
	"fmt"
	"sync"
	"testing"
)

// TestConcurrent runs puts, lists, deletes, appends and reads in parallel
// (meaningful under -race) and checks the totals afterwards and after a
// restart.
func TestConcurrent(t *testing.T) {
	const workers, per = 4, 25
	ts := openTest(t, Limits{})
	var wg sync.WaitGroup
	errs := make(chan error, 4*workers)
	for w := range workers {
		wg.Add(3)
		recipient := fmt.Sprintf("r%d", w%2) // two workers share a recipient
		sender := fmt.Sprintf("s%d", w)
		group := fmt.Sprintf("g%d", w%2)
		go func() { // puts, each twice (the repeat is a no-op), deleting every fifth
			defer wg.Done()
			for i := range per {
				o := ts.msg(recipient, sender, i)
				for range 2 {
					if _, err := ts.PutOffline(o); err != nil {
						errs <- err
						return
					}
				}
				if i%5 == 0 {
					if ok, err := ts.DeleteOffline(recipient, sender, o.ID); !ok || err != nil {
						errs <- fmt.Errorf("delete %s: %v, %v", o.ID, ok, err)
						return
					}
				}
			}
		}()
		go func() { // appends: two workers race on the same group and positions
			defer wg.Done()
			for i := range per {
				if err := ts.AppendReplay(group, entry(1, uint64(i+1))); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() { // readers
			defer wg.Done()
			for range per {
				if _, err := ts.Offline(recipient, 10); err != nil {
					errs <- err
					return
				}
				ts.ReplayAfter(group, 0, 0, 10)
				ts.OfflineCount(recipient)
				ts.Stats()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		held := per - per/5
		for r := range 2 {
			recipient := fmt.Sprintf("r%d", r)
			if n := ts.OfflineCount(recipient); n != 2*held {
				t.Fatalf("%s: OfflineCount(%s) = %d, want %d", when, recipient, n, 2*held)
			}
			if got, _ := ts.Offline(recipient, 0); len(got) != 2*held {
				t.Fatalf("%s: Offline(%s) lists %d, want %d", when, recipient, len(got), 2*held)
			}
			if last, _ := ts.ReplayLast(fmt.Sprintf("g%d", r)); last != (Pos{1, per}) {
				t.Fatalf("%s: ReplayLast = %v", when, last)
			}
			if es, _, _ := ts.ReplayAfter(fmt.Sprintf("g%d", r), 0, 0, 0); len(es) != per {
				t.Fatalf("%s: replay log holds %d, want %d", when, len(es), per)
			}
		}
	}
	check("after the run")
	st := ts.Stats()
	if st.OfflineStored != workers*per || st.ReplayAppended != 2*per {
		t.Fatalf("stats = %+v", st)
	}
	ts.reopen(t)
	check("after reopen")
}
