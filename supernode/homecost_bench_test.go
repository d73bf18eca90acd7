package supernode

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode/capacity"
)

// BenchmarkHomeCost measures what a group's home pays per publish as the
// group grows: ten supernodes (real Routers on real TCP libp2p hosts,
// TLS and yamux), one group whose home holds no members itself, and
// 100 to 30,000 members spread evenly over the nine others. Batched (one
// frame per supernode holding members) and naive (one frame per member:
// RouterConfig.PerMemberFanoutForTest) run side by side on the same
// supernodes and group.
//
// Members are not client runtimes: each is a generated key whose signed
// membership claim its supernode sends to the home through the real
// membership path (Router.sendMembership: MembershipBatch frames on the
// relay link, verified and recorded by the home's applyMembership), exactly
// what that supernode sends when a client joins. They have no sessions, so
// the member supernodes verify each group frame's stamp and drop it (no
// local members). Publishes come from a client of supernode 1 (its
// Router.onPublish: relayed to the home as in production), one at a time:
// the next publish waits until the home has written every frame of the
// last one (so no link queue overflows and drops frames the home would
// otherwise pay to write).
//
// home-us/publish is the CPU of the home's goroutines (labelled at its
// construction: its relay readers, its link writers, their yamux and TLS
// goroutines) per publish, from a CPU profile; allocs/publish the
// allocations on stacks through the home's publish path (homePublish and
// link writers: the home's, and supernode 1's relaying the publish, one
// frame; heap profiles carry no labels); frames/publish the group frames
// the home wrote.
//
//	go test -run '^$' -bench HomeCost -benchtime=1x -count=3 ./supernode/
func BenchmarkHomeCost(b *testing.B) {
	// A batched publish costs the home a few hundred µs: 2,000 of them
	// make a few hundred profile samples (100 Hz).
	sizes, publishes, naiveBudget := []int{100, 1000, 10000, 30000}, 2000, 60000
	if testing.Short() {
		sizes, publishes, naiveBudget = []int{100, 1000}, 20, 20000
	}
	sampleAllocs(b)
	f := newHomeCostFixture(b)
	for _, n := range sizes {
		g := f.groupOf(b, n)
		for _, naive := range []bool{false, true} {
			design, np := "batched", publishes
			if naive {
				// The naive home writes a frame per member, and each
				// member supernode verifies each frame's stamp: bound
				// the frames per size (the cost per publish is what is
				// compared).
				design, np = "naive", min(publishes, 200, max(3, naiveBudget/n))
			}
			b.Run(fmt.Sprintf("members=%d/design=%s", n, design), func(b *testing.B) {
				for range b.N {
					f.publishWindow(b, g, n, naive, np)
				}
			})
		}
	}
}

// homeCostFixture is the ten supernodes; sns[0] is the home.
type homeCostFixture struct {
	sns    []*testSupernode
	rg     atomic.Pointer[ring.Ring]
	pubKey crypto.PrivKey
	pubID  peer.ID
	groups int
}

const homeCostSupernodes = 10

func newHomeCostFixture(b *testing.B) *homeCostFixture {
	b.Helper()
	f := &homeCostFixture{}
	var ids []peer.ID
	dir := &peerSet{}
	for i := range homeCostSupernodes {
		role := "sn"
		if i == 0 {
			role = "home"
		}
		withRole(role, func() {
			h := newTCPHost(b)
			sems, err := capacity.NewSet(capacity.DefaultLimits(64))
			if err != nil {
				b.Fatal(err)
			}
			adm, err := NewAdmission(h, sems.Attached, AdmissionConfig{Writers: newWriters(b), Keepalive: 10 * time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(adm.Close)
			eng := newEngine(b)
			r, err := NewRouter(h, adm, RouterConfig{
				Ring: f.rg.Load, IsSupernode: dir.has,
				Refresh: 10 * time.Minute, MaxMemberships: 1 << 20, Sems: sems, Fanout: eng,
			})
			if err != nil {
				b.Fatal(err)
			}
			r.Start()
			b.Cleanup(r.Close)
			adm.Start()
			f.sns = append(f.sns, &testSupernode{h: h, adm: adm, sems: sems, r: r})
			ids = append(ids, h.ID())
		})
	}
	dir.add(ids...)
	f.rg.Store(newRing(b, ids...))
	for _, a := range f.sns {
		for _, o := range f.sns {
			if a != o {
				a.h.Peerstore().AddAddrs(o.h.ID(), o.h.Addrs(), peerstore.PermanentAddrTTL)
			}
		}
	}
	// Every member supernode dials the home, from its own labelled
	// goroutine: the home's side of each connection is then started by
	// its listener, under its label.
	for _, sn := range f.sns[1:] {
		withRole("sn", func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			if err := sn.h.Connect(ctx, peer.AddrInfo{ID: f.sns[0].h.ID(), Addrs: f.sns[0].h.Addrs()}); err != nil {
				b.Fatal(err)
			}
		})
	}
	var err error
	if f.pubKey, _, err = crypto.GenerateEd25519Key(nil); err != nil {
		b.Fatal(err)
	}
	f.pubID, _ = peer.IDFromPrivateKey(f.pubKey)
	return f
}

// groupOf makes a new group whose home is sns[0] with n members spread
// over sns[1:], entered through the member supernodes' membership path,
// and waits until the home holds all of them.
func (f *homeCostFixture) groupOf(b *testing.B, n int) string {
	b.Helper()
	home := f.sns[0]
	var g string
	for {
		f.groups++
		g = fmt.Sprintf("homecost-%d", f.groups)
		if h, ok := home.r.groupHome(g); ok && h == home.h.ID() {
			break
		}
	}
	ups := make([][]membershipUpdate, len(f.sns))
	for i := range n {
		k := 1 + i%(len(f.sns)-1)
		key, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			b.Fatal(err)
		}
		m, _ := peer.IDFromPrivateKey(key)
		claim, err := protocol.SignMembership(key, protocol.Membership{Group: g, Supernode: f.sns[k].h.ID(), Join: true, Seq: 1})
		if err != nil {
			b.Fatal(err)
		}
		ups[k] = append(ups[k], membershipUpdate{group: g, member: m, join: true, claim: claim})
	}
	for k, u := range ups {
		if len(u) > 0 {
			withRole("sn", func() { f.sns[k].r.sendMembership(u) })
		}
	}
	waitForLong(b, fmt.Sprintf("the home to hold %d members", n), func() bool {
		hv, ok := home.r.homeRecord(g)
		return ok && len(hv.At) == n
	})
	return g
}

// waitForLong is waitFor with a deadline for 30,000 signature checks on a
// loaded machine.
func waitForLong(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// homePath matches the functions of the home's publish path, for
// attributing allocations by stack.
func homePath(fn string) bool {
	return strings.HasPrefix(fn, "github.com/overlayd/overlayd/supernode.(*Router).homePublish") ||
		strings.HasPrefix(fn, "github.com/overlayd/overlayd/supernode.(*links).")
}

// groupFramesWritten sums the group frames the home wrote to every link.
func (f *homeCostFixture) groupFramesWritten() uint64 {
	var n uint64
	for _, sn := range f.sns[1:] {
		n += f.sns[0].r.GroupFramesWritten(sn.h.ID())
	}
	return n
}

// publishWindow publishes np messages to group g (n members) one at a time
// and reports the home's cost per publish.
func (f *homeCostFixture) publishWindow(b *testing.B, g string, n int, naive bool, np int) {
	home := f.sns[0]
	home.r.mu.Lock()
	home.r.cfg.PerMemberFanoutForTest = naive
	home.r.core.SetPerMemberFanoutForTest(naive)
	home.r.mu.Unlock()
	per := uint64(len(f.sns) - 1)
	if naive {
		per = uint64(n)
	}
	pubs := make([]*pb.GroupPublish, np)
	for i := range pubs {
		id := protocol.NewMessageID()
		signed, err := protocol.SignPublish(f.pubKey, g, id, make([]byte, 128))
		if err != nil {
			b.Fatal(err)
		}
		pubs[i] = &pb.GroupPublish{Group: g, Id: id, Signed: signed}
	}
	st := &home.r.stats
	dropped0 := st.LinkQueueFrames.Load() + st.LinkQueueBytes.Load() + st.LinksTotalBytes.Load() + st.LinkMemory.Load() + st.LinkFailed.Load()
	load := loadAvg()
	obj0, _ := heapAllocs(b, homePath)
	sent0 := f.groupFramesWritten()
	b.ResetTimer()
	w := startCPU(b)
	for i, p := range pubs {
		withRole("publisher", func() { f.sns[1].r.onPublish(f.pubID, p) })
		want := sent0 + uint64(i+1)*per
		deadline := time.Now().Add(2 * time.Minute)
		for f.groupFramesWritten() < want && time.Now().Before(deadline) {
			time.Sleep(200 * time.Microsecond)
		}
		if f.groupFramesWritten() < want {
			b.Fatalf("publish %d: the home wrote %d of %d frames", i, f.groupFramesWritten()-sent0, uint64(i+1)*per)
		}
	}
	res := w.stop(b)
	b.StopTimer()
	obj1, _ := heapAllocs(b, homePath)
	sent := f.groupFramesWritten() - sent0
	dropped := st.LinkQueueFrames.Load() + st.LinkQueueBytes.Load() + st.LinksTotalBytes.Load() + st.LinkMemory.Load() + st.LinkFailed.Load() - dropped0
	saveProfile(b, b.Name(), res.raw)
	homeCPU := res.byRole["home"]
	b.ReportMetric(float64(homeCPU.Microseconds())/float64(np), "home-us/publish")
	b.ReportMetric(float64(obj1-obj0)/float64(np), "allocs/publish")
	b.ReportMetric(float64(sent)/float64(np), "frames/publish")
	b.Logf("load %s; %d publishes to %d members (%s): home CPU %v, process %v, by role %v; frames written %d, link drops %d",
		load, np, n, map[bool]string{false: "batched", true: "naive"}[naive], homeCPU, res.process, res.byRole, sent, dropped)
	if dropped > 0 {
		b.Errorf("the home dropped %d link frames: the cost is understated", dropped)
	}
}
