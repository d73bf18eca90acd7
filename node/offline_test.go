package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/supernode/store"
)

// supernodesWith is supernodes with node options (the same for each).
func supernodesWith(t *testing.T, k, capacity int, opts ...Option) []*Node {
	t.Helper()
	var sns []*Node
	boot := ""
	for range k {
		c := attachConfig(t, config.RoleSupernode, boot)
		c.Capacity = capacity
		n, err := New(c, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Start(context.Background()); err != nil {
			n.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		if boot == "" {
			boot = p2pAddr(n)
		}
		sns = append(sns, n)
	}
	waitFor(t, 5*time.Second, "supernode rings", func() bool {
		for _, sn := range sns {
			if r := sn.Ring(); r == nil || r.Len() != k {
				return false
			}
		}
		return true
	})
	return sns
}

// storedAt counts the supernodes of sns whose store holds messages for id.
func storedAt(sns []*Node, id peer.ID) (holders, total int) {
	for _, sn := range sns {
		if sn.store == nil {
			continue
		}
		if c := sn.store.OfflineCount(string(id)); c > 0 {
			holders++
			total += c
		}
	}
	return holders, total
}

// lateRecipient starts, on key, a client that was offline until now,
// listening before its first attach so nothing forwarded to it is missed.
func lateRecipient(t *testing.T, boot string, key crypto.PrivKey) (*Node, *client.Listener) {
	t.Helper()
	gate := make(chan struct{})
	n := startClient(t, boot, WithIdentity(key), WithAttachGateForTest(gate))
	l := n.Client().Listen()
	t.Cleanup(l.Close)
	close(gate)
	return n, l
}

// expectOnly reads l until a message with payload marker, and checks that
// what came before it is exactly want, in order, each once.
func expectOnly(t *testing.T, l *client.Listener, want []string, marker string) {
	t.Helper()
	var got []string
	for {
		in := next(t, l, 10*time.Second)
		if in.Kind != client.KindDirect {
			t.Fatalf("unexpected %+v", in)
		}
		if string(in.Payload) == marker {
			break
		}
		got = append(got, string(in.Payload))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("received %q before the marker, want %q", got, want)
	}
}

// deliverStored sends texts to the offline peer key from a, checks they
// are stored, starts the peer (bootstrapping through boot) and checks it
// receives each exactly once: it waits until no replica holds any (each
// copy was acked), then a marker message sent afterwards bounds the
// window in which duplicates would show.
func deliverStored(t *testing.T, a *Node, sns []*Node, key crypto.PrivKey, boot string, texts []string, between func()) {
	t.Helper()
	id, _ := peer.IDFromPrivateKey(key)
	ctx := context.Background()
	for _, text := range texts {
		res, err := a.Client().Send(ctx, id, []byte(text))
		if err != nil || !res.Stored {
			t.Fatalf("send %q to an offline peer: %+v, %v; want stored", text, res, err)
		}
	}
	if between != nil {
		between()
	}
	b, l := lateRecipient(t, boot, key)
	waitFor(t, 10*time.Second, "b attached", func() bool { return b.attachmentForTest() != "" })
	waitFor(t, 10*time.Second, "every replica's copies acked and deleted", func() bool {
		_, total := storedAt(sns, id)
		return total == 0
	})
	if res, err := a.Client().Send(ctx, id, []byte("marker")); err != nil || res.Stored {
		t.Fatalf("marker to the attached peer: %+v, %v", res, err)
	}
	expectOnly(t, l, texts, "marker")
}

// TestOfflineMessageStoredThenDelivered: a direct message to a peer that is
// attached nowhere is stored by a majority of its home cluster; the peer,
// started afterwards, receives it exactly once, in send order with the
// others from the same sender.
func TestOfflineMessageStoredThenDelivered(t *testing.T) {
	sns := supernodes(t, 3, 10)
	a, _ := clientAt(t, sns, sns[0])
	key, id := newKey(t)
	texts := []string{"while you were out", "second", "third"}
	deliverStored(t, a, sns, key, p2pAddr(sns[1]), texts, func() {
		holders, total := storedAt(sns, id)
		if holders < 2 || total < 2*len(texts) {
			t.Fatalf("stored at %d supernodes (%d copies), want a majority of the 3 with every message", holders, total)
		}
		if got := sns[0].metricForTest(t, "overlayd_supernode_direct_messages_total", "outcome", "stored"); got != float64(len(texts)) {
			t.Fatalf("sender's supernode counted %v stored, want %d", got, len(texts))
		}
	})
	var delivered, deleted float64
	for _, sn := range sns {
		delivered += sn.metricForTest(t, "overlayd_supernode_offline_delivered_total")
		deleted += sn.metricForTest(t, "overlayd_supernode_offline_deleted_total")
	}
	if delivered < deleted || deleted < float64(2*len(texts)) {
		t.Fatalf("replicas forwarded %v and deleted %v copies, want at least %d deleted", delivered, deleted, 2*len(texts))
	}
}

// TestOfflineMessageSurvivesReplicaLoss: one of the recipient's three
// home-cluster supernodes dies between the store and the recipient's
// start; the message still arrives, once.
func TestOfflineMessageSurvivesReplicaLoss(t *testing.T) {
	sns := supernodes(t, 4, 10)
	a, _ := clientAt(t, sns, sns[0])
	var key crypto.PrivKey
	var victim *Node
	for victim == nil {
		k, id := newKey(t)
		home := cluster.Home(sns[0].Ring(), []byte(id))
		for _, sn := range sns[1:] {
			if len(home) == 3 && home[0] == sn.ID() {
				key, victim = k, sn
			}
		}
	}
	id, _ := peer.IDFromPrivateKey(key)
	var live []*Node
	for _, sn := range sns {
		if sn != victim {
			live = append(live, sn)
		}
	}
	deliverStored(t, a, live, key, p2pAddr(live[len(live)-1]), []string{"despite a crash"}, func() {
		waitFor(t, 10*time.Second, "all three replicas stored it", func() bool {
			h, _ := storedAt(sns, id)
			return h == 3
		})
		victim.CloseAbruptlyForTest()
	})
}

// TestOfflineQuota: a sender flooding an offline peer is told ErrOverQuota
// past the per-recipient quota, and no replica's store holds more.
func TestOfflineQuota(t *testing.T) {
	const quota = 5
	sns := supernodesWith(t, 3, 10, WithStoreLimitsForTest(store.Limits{OfflinePerRecipient: store.Quota{Count: quota}}))
	a, _ := clientAt(t, sns, sns[0])
	_, id := newKey(t)
	ctx := context.Background()
	for i := range quota {
		if res, err := a.Client().Send(ctx, id, []byte("flood")); err != nil || !res.Stored {
			t.Fatalf("send %d within the quota: %+v, %v", i, res, err)
		}
	}
	for i := range 3 {
		_, err := a.Client().Send(ctx, id, []byte("flood"))
		if !errors.Is(err, client.ErrOverQuota) || !strings.Contains(err.Error(), "quota") {
			t.Fatalf("send %d past the quota: %v, want ErrOverQuota naming the quota", quota+i, err)
		}
	}
	for _, sn := range sns {
		if c := sn.store.OfflineCount(string(id)); c > quota {
			t.Fatalf("%s holds %d messages for the peer, quota %d", sn.ID().ShortString(), c, quota)
		}
		if st := sn.Status().OfflineStore; st == nil || st.Messages > quota || st.Bytes > st.MaxBytes {
			t.Fatalf("status of %s: %+v", sn.ID().ShortString(), st)
		}
	}
	var refused float64
	for _, sn := range sns {
		refused += sn.metricForTest(t, "overlayd_supernode_offline_refused_total", "reason", "over_quota")
	}
	if refused < 2*3 {
		t.Fatalf("refused over quota %v times, want at least a majority for each of the 3", refused)
	}
}

// TestOfflineStoreSurvivesRestart: the only supernode (the whole home
// cluster) stores a message, stops, and starts again on the same data dir
// and identity; the recipient, started after that, receives it.
func TestOfflineStoreSurvivesRestart(t *testing.T) {
	cfg := attachConfig(t, config.RoleSupernode, "")
	cfg.Capacity = 10
	sn := startNode(t, cfg)
	waitFor(t, 5*time.Second, "ring", func() bool { return sn.Ring() != nil })
	a := startClient(t, p2pAddr(sn))
	waitFor(t, 5*time.Second, "a attached", func() bool { return a.attachmentForTest() != "" })
	key, id := newKey(t)
	if res, err := a.Client().Send(context.Background(), id, []byte("kept on disk")); err != nil || !res.Stored {
		t.Fatalf("send: %+v, %v", res, err)
	}
	a.Close()
	if err := sn.Close(); err != nil {
		t.Fatal(err)
	}
	sn2 := startNode(t, cfg)
	if sn2.ID() != sn.ID() {
		t.Fatalf("restarted as %s, want %s", sn2.ID(), sn.ID())
	}
	if c := sn2.store.OfflineCount(string(id)); c != 1 {
		t.Fatalf("restarted store holds %d messages, want 1", c)
	}
	waitFor(t, 5*time.Second, "ring", func() bool { return sn2.Ring() != nil })
	_, l := lateRecipient(t, p2pAddr(sn2), key)
	if in := next(t, l, 10*time.Second); string(in.Payload) != "kept on disk" {
		t.Fatalf("got %+v", in)
	}
	waitFor(t, 10*time.Second, "deleted on the ack", func() bool { return sn2.store.OfflineCount(string(id)) == 0 })
}

// TestCorruptStoreFailsStart: a supernode whose store.db is not a store
// does not start, with an error naming the file, and leaves it as it was.
func TestCorruptStoreFailsStart(t *testing.T) {
	cfg := attachConfig(t, config.RoleSupernode, "")
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cfg.DataDir, StoreFile)
	junk := []byte(strings.Repeat("not a bbolt file ", 1000))
	if err := os.WriteFile(path, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = n.Start(context.Background())
	n.Close()
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Start = %v, want ErrCorrupt naming %s", err, path)
	}
	if got, _ := os.ReadFile(path); string(got) != string(junk) {
		t.Fatal("the corrupt file was changed")
	}
}

// TestOfflineMessageExpires: a stored message whose TTL passes before its
// recipient attaches is removed and counted at every replica, and not
// delivered.
func TestOfflineMessageExpires(t *testing.T) {
	var sns []*Node
	boot := ""
	for range 3 {
		c := attachConfig(t, config.RoleSupernode, boot)
		c.Capacity, c.OfflineTTL = 10, time.Second
		sn := startNode(t, c)
		if boot == "" {
			boot = p2pAddr(sn)
		}
		sns = append(sns, sn)
	}
	waitFor(t, 5*time.Second, "supernode rings", func() bool {
		for _, sn := range sns {
			if r := sn.Ring(); r == nil || r.Len() != 3 {
				return false
			}
		}
		return true
	})
	a, _ := clientAt(t, sns, sns[0])
	key, id := newKey(t)
	if res, err := a.Client().Send(context.Background(), id, []byte("too late")); err != nil || !res.Stored {
		t.Fatalf("send: %+v, %v", res, err)
	}
	waitFor(t, 10*time.Second, "expired at every replica", func() bool {
		_, total := storedAt(sns, id)
		return total == 0
	})
	var expired float64
	for _, sn := range sns {
		expired += sn.metricForTest(t, "overlayd_supernode_offline_expired_total")
	}
	if expired < 2 {
		t.Fatalf("counted %v expired, want one per replica that held it (at least 2)", expired)
	}
	b, l := lateRecipient(t, p2pAddr(sns[1]), key)
	waitFor(t, 10*time.Second, "b attached", func() bool { return b.attachmentForTest() != "" })
	// The sender's supernode answers stored or delivered from its own
	// presence records: b's own view of its attachment reaches it a
	// presence batch later (nothing is stored here to mark that moment,
	// as the acked copies do in deliverStored).
	waitFor(t, 10*time.Second, "b's attachment known at the sender's supernode", func() bool {
		at, ok := sns[0].router.Locate(id)
		return ok && at == b.attachmentForTest()
	})
	if res, err := a.Client().Send(context.Background(), id, []byte("marker")); err != nil || res.Stored {
		t.Fatalf("marker: %+v, %v", res, err)
	}
	expectOnly(t, l, nil, "marker")
}

// BenchmarkOfflineStore measures storing direct messages for offline peers
// through one supernode with R = 3: a client attached to one of 3
// supernodes sends 200-byte messages to 256 peers that are attached
// nowhere, from 4 goroutines; each Send returns once a majority of the
// recipient's home cluster stored the message on disk. It reports stored
// messages per second and the latency to "stored" (p50, p99); the same
// load to 4 attached peers (delivered and acked) runs beside it.
//
//	go test -run '^$' -bench OfflineStore -benchtime 2000x -count 3 ./node
func BenchmarkOfflineStore(b *testing.B) {
	lim := store.Limits{OfflinePerSender: store.Quota{Count: 1 << 30, Bytes: 1 << 40}}
	var sns []*Node
	boot := ""
	for range 3 {
		c := attachConfig(b, config.RoleSupernode, boot)
		c.Capacity = 10
		n, err := New(c, WithStoreLimitsForTest(lim))
		if err != nil {
			b.Fatal(err)
		}
		if err := n.Start(context.Background()); err != nil {
			n.Close()
			b.Fatal(err)
		}
		b.Cleanup(func() { n.Close() })
		if boot == "" {
			boot = p2pAddr(n)
		}
		sns = append(sns, n)
	}
	waitFor(b, 10*time.Second, "supernode rings", func() bool {
		for _, sn := range sns {
			if r := sn.Ring(); r == nil || r.Len() != 3 {
				return false
			}
		}
		return true
	})
	a, err := New(attachConfig(b, config.RoleOrdinary, boot))
	if err != nil {
		b.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		a.Close()
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	waitFor(b, 10*time.Second, "sender attached", func() bool { return a.attachmentForTest() != "" })
	offline := make([]peer.ID, 256)
	for i := range offline {
		k, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			b.Fatal(err)
		}
		offline[i], _ = peer.IDFromPrivateKey(k)
	}
	// The same sends to peers that are attached, for comparison in the
	// same run: delivered and acked by the recipient.
	var online []peer.ID
	for range 4 {
		r, err := New(attachConfig(b, config.RoleOrdinary, boot))
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Start(context.Background()); err != nil {
			r.Close()
			b.Fatal(err)
		}
		b.Cleanup(func() { r.Close() })
		online = append(online, r.ID())
		waitFor(b, 10*time.Second, "recipient attached", func() bool { return r.attachmentForTest() != "" })
	}
	b.Run("stored", func(b *testing.B) { sendLoad(b, a, offline, true) })
	b.Run("delivered", func(b *testing.B) { sendLoad(b, a, online, false) })
}

// sendLoad sends b.N 200-byte direct messages from a to the peers in to,
// from 4 goroutines, and reports messages per second and the latency of
// Send (p50, p99); each must be stored (recipients offline) or delivered.
func sendLoad(b *testing.B, a *Node, to []peer.ID, stored bool) {
	payload := make([]byte, 200)
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range 4 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < b.N; i = int(next.Add(1) - 1) {
				t0 := time.Now()
				res, err := a.Client().Send(context.Background(), to[i%len(to)], payload)
				if err == nil && res.Stored != stored {
					err = fmt.Errorf("stored %v, want %v", res.Stored, stored)
				}
				if err != nil {
					errs <- err
					return
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
