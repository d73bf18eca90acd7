package supernode

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode/group"
	"github.com/overlayd/overlayd/supernode/store"
)

// BenchmarkResumeStorm: members resuming together after an outage, each
// missing the same messages (issue 15: 1,000 members, 100 messages each).
// The group's home replays, paced (group.ReplayFramesPerTick a tick), against the
// same replay unpaced, in one run. Reported: the time until every member
// has caught up (all missed messages and its Resumed notice), the home's
// busiest 100 ms window in replayed frames, and the round trip of a
// keepalive ping to the home while it replays (a client attached to the
// home pings every 10 ms): the home must keep answering within the
// keepalive bound. -short runs 100 members.
//
//	go test -run '^$' -bench ResumeStorm -benchtime 1x -count 3 ./supernode
func BenchmarkResumeStorm(b *testing.B) {
	members, missed := 1000, 100
	if testing.Short() {
		members = 100
	}
	for _, mode := range []struct {
		name   string
		budget int
	}{{"paced", group.ReplayFramesPerTick}, {"unpaced", 1 << 30}} {
		b.Run(fmt.Sprintf("%s/members=%d/missed=%d", mode.name, members, missed), func(b *testing.B) {
			for range b.N {
				resumeStorm(b, members, missed, mode.budget)
			}
		})
	}
}

func resumeStorm(b *testing.B, members, missed, budget int) {
	b.StopTimer()
	c := newNoLossClusterCap(b, 4, members+8)
	home := c.sns[0].r
	home.mu.Lock()
	home.core.SetReplayBudgetForTest(budget)
	home.mu.Unlock()
	g := c.groupHomedAt(0)
	pub := c.attachMember(c.n.host(b), 1, 1)
	first := pub.publish(g, "m0")
	if first.GetStatus() != pb.Result_STATUS_OK {
		b.Fatalf("publish: %v", first)
	}
	for i := 1; i <= missed; i++ {
		if res := pub.publish(g, fmt.Sprintf("m%d", i)); res.GetStatus() != pb.Result_STATUS_OK {
			b.Fatalf("publish %d: %v", i, res)
		}
	}
	// The members come back on the three other supernodes.
	ms := make([]*member, members)
	for i := range ms {
		ms[i] = c.attachMember(c.clientHost(), 1+i%3, 1)
	}
	probe := c.attachMember(c.clientHost(), 0, 1)

	var (
		mu    sync.Mutex
		rtts  []time.Duration
		peak  uint64
		stop  = make(chan struct{})
		wg    sync.WaitGroup
		since = home.stats.Replayed.Load()
	)
	wg.Go(func() { // the home's busiest 100 ms window
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		last := since
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			n := home.stats.Replayed.Load()
			mu.Lock()
			peak = max(peak, n-last)
			mu.Unlock()
			last = n
		}
	})
	wg.Go(func() { // keepalives to the home
		for seq := uint64(1); ; seq++ {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			t0 := time.Now()
			if probe.pingWait(seq) {
				mu.Lock()
				rtts = append(rtts, time.Since(t0))
				mu.Unlock()
			}
		}
	})
	at := store.Pos{Epoch: first.GetEpoch(), Seq: first.GetSeq()}
	b.StartTimer()
	start := time.Now()
	for i, m := range ms {
		m.join(c.sns[1+i%3].h.ID(), g, &at)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for _, m := range ms {
		for {
			m.mu.Lock()
			done := len(m.got) >= missed && len(m.resumed) == 1
			m.mu.Unlock()
			if done {
				break
			}
			if time.Now().After(deadline) {
				caught := 0
				for _, m := range ms {
					m.mu.Lock()
					if len(m.got) >= missed && len(m.resumed) == 1 {
						caught++
					}
					m.mu.Unlock()
				}
				m.mu.Lock()
				got, resumed := len(m.got), len(m.resumed)
				m.mu.Unlock()
				hs := &home.stats
				b.Fatalf("%d/%d members caught up in time; one has %d messages, %d resumed; home: replays started %d done %d, frames %d, link drops frames %d bytes %d total %d memory %d; supernodes: timed out %d, %d %d %d",
					caught, len(ms), got, resumed, hs.ReplaysStarted.Load(), hs.ReplaysDone.Load(), hs.Replayed.Load(),
					hs.LinkQueueFrames.Load(), hs.LinkQueueBytes.Load(), hs.LinksTotalBytes.Load(), hs.LinkMemory.Load(),
					c.sns[1].r.stats.ResumesTimedOut.Load(), c.sns[1].r.stats.OversizeGroup.Load(), c.sns[1].r.stats.MembershipRefused.Load(), c.sns[1].r.stats.GroupRefused.Load())
			}
			time.Sleep(time.Millisecond)
		}
	}
	took := time.Since(start)
	b.StopTimer()
	close(stop)
	wg.Wait()
	// Each member got the missed messages once, in order (by position:
	// checking each signature again would measure the benchmark).
	for _, m := range ms {
		m.mu.Lock()
		for i, gm := range m.got {
			if gm.GetEpoch() != at.Epoch || gm.GetSeq() != at.Seq+1+uint64(i) || len(m.got) != missed {
				m.mu.Unlock()
				b.Fatalf("a member got %d messages, message %d at (%d, %d): want %d in order after %v", len(m.got), i, gm.GetEpoch(), gm.GetSeq(), missed, at)
			}
		}
		m.mu.Unlock()
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(rtts)
	b.ReportMetric(took.Seconds(), "s-to-catch-up")
	b.ReportMetric(float64(peak), "frames/100ms-peak")
	if len(rtts) > 0 {
		b.ReportMetric(float64(rtts[len(rtts)/2].Microseconds())/1000, "ms-ping-p50")
		b.ReportMetric(float64(rtts[len(rtts)-1].Microseconds())/1000, "ms-ping-max")
	}
}
