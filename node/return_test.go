package node

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/overlay/cluster"
)

// TestReturnHomeLosesNoGroupMessage: a member moving back to its home
// cluster while a group is published to continuously receives every
// message. It joins the group on its new session before it leaves the old
// one, and reads the old one until the membership has moved, so a message
// the group's home still sends to the old supernode arrives.
func TestReturnHomeLosesNoGroupMessage(t *testing.T) {
	// Five supernodes of capacity 1: the member's home cluster is three of
	// them, each filled by a blocker, so the member starts on one of the
	// other two and the publisher takes the last.
	sns := supernodes(t, 5, 1)
	boot := p2pAddr(sns[0])
	mkey, mid := newKey(t)
	homeIDs := cluster.Home(sns[0].Ring(), []byte(mid))
	var blockers []*Node
	for _, h := range homeIDs {
		sn := byID(sns, h)
		b := startClientConfig(t, attachConfig(t, config.RoleOrdinary, boot), WithIdentity(keyHomedAt(t, sns, sn)))
		waitFor(t, 5*time.Second, "blocker at the member's home", func() bool { return b.attachmentForTest() == h })
		blockers = append(blockers, b)
	}
	home := byID(sns, homeIDs[0])
	mc := attachConfig(t, config.RoleOrdinary, boot)
	mc.ReturnInterval = 200 * time.Millisecond
	member := startClientConfig(t, mc, WithIdentity(mkey))
	waitFor(t, 10*time.Second, "member away from home", func() bool {
		a := member.attachmentForTest()
		return a != "" && !slices.Contains(homeIDs, a)
	})
	blocker := blockers[0]
	away := member.attachmentForTest()
	publisher := startClient(t, p2pAddr(home))
	waitFor(t, 5*time.Second, "publisher attached", func() bool { return publisher.attachmentForTest() != "" })
	l := member.Client().Listen()
	const group = "moving"
	for _, n := range []*Node{member, publisher} {
		if err := n.Client().Join(group); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	waitFor(t, 5*time.Second, "home knows both", func() bool {
		ms, err := publisher.Client().Members(ctx, group)
		return err == nil && len(ms) == 2
	})

	// Read as it arrives: a listener drops what it cannot buffer.
	var mu sync.Mutex
	seen := map[uint64]bool{}
	epochs := map[uint64]bool{}
	var others []client.Inbound
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for in := range l.C {
			mu.Lock()
			if in.Kind == "group" {
				seen[in.Seq] = true
				epochs[in.Epoch] = true
			} else {
				others = append(others, in)
			}
			mu.Unlock()
		}
	}()

	// Publish from 4 goroutines until the member has moved home and a
	// little after; then free the home slot. Each is paced to one publish
	// per 2 ms: unpaced, the publishers outran the member's reader (3,000
	// to 5,000 a second), and the listener's and the supernode's bounded
	// queues dropped blocks of messages, reported as gaps. That is the
	// slow-recipient policy at work, not a loss in the move.
	var published atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			pace := time.NewTicker(2 * time.Millisecond)
			defer pace.Stop()
			for {
				select {
				case <-stop:
					return
				case <-pace.C:
				}
				if _, err := publisher.Client().Publish(ctx, group, []byte("x")); err == nil {
					published.Add(1)
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond) // publishing before the move; not synchronisation
	blocker.Close()
	waitFor(t, 10*time.Second, "member home", func() bool { return member.attachmentForTest() == home.ID() })
	time.Sleep(300 * time.Millisecond) // and after it
	close(stop)
	wg.Wait()
	want := published.Load()

	received := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	deadline := time.Now().Add(5 * time.Second)
	for int64(received()) < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling the reader's count; nothing to wait on
	}
	if int64(received()) < want {
		mu.Lock()
		var missing []uint64
		for q := uint64(1); q <= uint64(want); q++ {
			if !seen[q] {
				missing = append(missing, q)
			}
		}
		var gaps uint64
		for _, in := range others {
			gaps += in.Dropped
		}
		mu.Unlock()
		t.Fatalf("member received %d of %d messages while moving home from %s; %d missing, first %v; gap notices report %d dropped by full queues",
			received(), want, away.ShortString(), len(missing), missing[:min(len(missing), 10)], gaps)
	}
	l.Close()
	<-readDone
	if len(epochs) != 1 || len(others) > 0 {
		t.Fatalf("epochs %v (the group's home moved?), other inbound %+v", epochs, others)
	}
	t.Logf("%d messages published across the move, all received", want)
}
