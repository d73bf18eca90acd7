package dircost

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/overlay/view"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/testnet/synthid"
)

// quickDirCost are params that run in a second or two: fewer clients and
// origins, a smaller directory.
func quickDirCost() Params {
	p := DefaultParams()
	p.Clients, p.Origins, p.MaxDirectory = 100, 2, 1000
	return p
}

func mustDirCost(t testing.TB, sizes []int, p Params) []Row {
	t.Helper()
	rows, err := Compute(sizes, p)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// row returns the row of rows for s supernodes and design.
func row(t testing.TB, rows []Row, s int, design string) Row {
	t.Helper()
	for _, r := range rows {
		if r.Supernodes == s && r.Design == design {
			return r
		}
	}
	t.Fatalf("no row for %d supernodes, design %s", s, design)
	return Row{}
}

func TestDirCostDeterministic(t *testing.T) {
	p := quickDirCost()
	p.Clients, p.Intervals = 30, 1
	a := mustDirCost(t, []int{100, 300}, p)
	b := mustDirCost(t, []int{100, 300}, p)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different rows:\n%s\n%s", Markdown(a), Markdown(b))
	}
	p.Seed++
	if c := mustDirCost(t, []int{100, 300}, p); reflect.DeepEqual(a, c) {
		t.Fatal("another seed gave the same rows: the seed is not used")
	}
}

// TestDirCostSigned: the model's announcements are signed as GossipSub
// signs them, so protocol.OpenSigned (what a view client runs) opens
// them, a mega's included, and refuses one altered.
func TestDirCostSigned(t *testing.T) {
	op, err := newSigner(99, -1, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		operator crypto.PrivKey
		role     protocol.Role
	}{
		{"supernode", nil, protocol.RoleSupernode},
		{"mega", op.key, protocol.RoleMega},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := newSigner(7, 3, tc.operator)
			if err != nil {
				t.Fatal(err)
			}
			m, err := s.message(epoch(), 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			signed, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			id, data, err := protocol.OpenSigned(signed)
			if err != nil || id != s.id || !bytes.Equal(data, m.Data) {
				t.Fatalf("OpenSigned = %v, %d bytes, %v; want %v and the data", id, len(data), err, s.id)
			}
			a, err := protocol.UnmarshalAnnouncement(data)
			if err != nil || a.Role != tc.role {
				t.Fatalf("announcement role %v, err %v; want %v", a.Role, err, tc.role)
			}
			m.Data[len(m.Data)-1] ^= 1
			bad, _ := proto.Marshal(m)
			if _, _, err := protocol.OpenSigned(bad); protocol.ReasonOf(err) != protocol.ReasonBadSignature {
				t.Fatalf("altered message: err %v, want bad_signature", err)
			}
		})
	}
}

// TestDirCostViewSize: a refresh's first response carries, signed, one
// entry per view slot (view.Neighbours + view.Spares + the megas, at most
// view.MaxMegas), so the model's per-client cost follows the view's
// constants and view.Build, never copies of them; and a cross-check right
// after it carries view.Neighbours entries and nothing to check.
func TestDirCostViewSize(t *testing.T) {
	p := quickDirCost()
	iv := 10 * time.Second
	d, err := newViewDir(p.MaxDirectory, iv, p)
	if err != nil {
		t.Fatal(err)
	}
	w, err := newWire(iv)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	megas := min(p.Megas, view.MaxMegas)
	want := view.Neighbours + view.Spares + megas
	var total, short int
	const clients = 200
	for i := range clients {
		c := &viewClient{key: []byte(synthid.ID(p.Seed, synthid.Client, uint64(i)))}
		_, _, checks := d.exchange(c, false, w, rng)
		// A spare drawn among the neighbours is one entry less.
		if got := len(c.held); got > want || got < want-view.Spares {
			t.Fatalf("client %d holds %d entries, want %d", i, got, want)
		}
		total += len(c.held)
		if len(c.held) < want {
			short++
		}
		if checks != len(c.held)+megas {
			t.Fatalf("client %d: %d checks for %d entries (%d megas)", i, checks, len(c.held), megas)
		}
		if _, _, checks := d.exchange(c, true, w, rng); checks != 0 {
			t.Fatalf("client %d: cross-check right after the refresh made %d checks", i, checks)
		}
	}
	if short > clients/10 {
		t.Fatalf("%d of %d views short of %d entries (mean %.2f)", short, clients, want, float64(total)/clients)
	}
}

// TestDirCostScaling: the view design's cost per ordinary node at 100,000
// supernodes is within issue 21's target (≤ 1 KB/s, ≤ 10 checks/s); per
// refresh it is the same at every size (within 10%), and per second it
// never grows with the tier (the interval stretches: it falls); today's
// grows linearly (checks at 10,000 are 10 times those at 1,000, within
// 10%).
func TestDirCostScaling(t *testing.T) {
	if testing.Short() {
		t.Skip("about 3 s of CPU, 20 s under -race")
	}
	sizes := []int{100, 1000, 10000, 100000}
	p := quickDirCost()
	p.Origins, p.Clients, p.Intervals, p.MaxDirectory = 1, 50, 2, 400
	w, err := newWire(p.Base)
	if err != nil {
		t.Fatal(err)
	}
	// Today's design only where the test compares it: at 100,000 its
	// flood alone is 1.6 million events.
	var rows []Row
	for _, s := range sizes {
		rng := rand.New(rand.NewPCG(p.Seed, uint64(s)))
		if s == 1000 || s == 10000 {
			rows = append(rows, costToday(s, p, w, rng))
		}
		r, err := costView(s, p, w, rng)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	t.Logf("\n%s", Markdown(rows))
	big := row(t, rows, 100000, DesignView)
	if big.OrdinaryBps > 1000 || big.OrdinaryChecks > 10 {
		t.Errorf("view design at 100,000: %.0f B/s and %.2f checks/s per ordinary node, want ≤ 1,000 and ≤ 10", big.OrdinaryBps, big.OrdinaryChecks)
	}
	small := row(t, rows, 100, DesignView)
	for _, s := range sizes {
		r := row(t, rows, s, DesignView)
		if !within(r.RefreshBytes, small.RefreshBytes, 0.1) || !within(r.RefreshChecks, small.RefreshChecks, 0.1) {
			t.Errorf("view design per refresh at %d: %.0f B, %.2f checks; at 100: %.0f B, %.2f checks", s, r.RefreshBytes, r.RefreshChecks, small.RefreshBytes, small.RefreshChecks)
		}
		if r.OrdinaryBps > 1.1*small.OrdinaryBps || r.OrdinaryChecks > 1.1*small.OrdinaryChecks {
			t.Errorf("view design per ordinary node grows: %.0f B/s, %.2f checks/s at %d; %.0f, %.2f at 100", r.OrdinaryBps, r.OrdinaryChecks, s, small.OrdinaryBps, small.OrdinaryChecks)
		}
	}
	k, tk := row(t, rows, 1000, DesignToday), row(t, rows, 10000, DesignToday)
	if ratio := tk.OrdinaryChecks / k.OrdinaryChecks; !within(ratio, 10, 0.1) {
		t.Errorf("today, checks per ordinary node at 10,000 / at 1,000 = %.2f, want 10 ± 10%%", ratio)
	}
}

func within(x, want, frac float64) bool { return math.Abs(x-want) <= frac*math.Abs(want) }

// TestDirCostTable prints the figures of docs/bench-log/directory.md (about
// 40 s; OVERLAYD_SIM_DIRCOST_SEED sets another seed):
//
//	OVERLAYD_SIM_DIRCOST=1 go test ./testnet/dircost -run TestDirCostTable -v -count=1 -timeout 10m
func TestDirCostTable(t *testing.T) {
	if os.Getenv("OVERLAYD_SIM_DIRCOST") == "" {
		t.Skip("set OVERLAYD_SIM_DIRCOST=1")
	}
	p := DefaultParams()
	if s := os.Getenv("OVERLAYD_SIM_DIRCOST_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		p.Seed = seed
	}
	w, err := newWire(p.Base)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("wire: announcement RPC %d B (a mega's %d B), view stream framing %d B each way", w.rpc, w.rpcMega, w.streamIn)
	t0 := time.Now()
	rows := mustDirCost(t, []int{100, 1000, 10000, 100000}, p)
	t.Logf("seed %d, wall %v\n%s\n%s", p.Seed, time.Since(t0).Round(time.Millisecond), Markdown(rows), RefreshMarkdown(rows))
}

// BenchmarkDirCostViewBuild is what serving one view costs a supernode
// (view.Build, the whole request, neighbours only for a cross-check) at
// the directory sizes the model serves from: Build reads the whole
// directory and ring on every request.
//
//	go test ./testnet/dircost -run '^$' -bench DirCostViewBuild -benchtime 200x
//
// Under -short, the 1,000-entry directory only.
func BenchmarkDirCostViewBuild(b *testing.B) {
	sizes := []int{1000, 10000}
	if testing.Short() {
		sizes = sizes[:1]
	}
	for _, n := range sizes {
		p := DefaultParams()
		d, err := newViewDir(n, 10*time.Second, p)
		if err != nil {
			b.Fatal(err)
		}
		for _, check := range []bool{false, true} {
			b.Run(fmt.Sprintf("directory=%d/neighbours_only=%v", n, check), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 1))
				keys := [][]byte{[]byte(synthid.ID(p.Seed, synthid.Client, 1))}
				b.ReportAllocs()
				for b.Loop() {
					view.Build(d.ring, d.snap, keys, nil, check, rng)
				}
			})
		}
	}
}

// TestDirCostIHave: the IHAVE estimate follows emitGossip: none without
// peers outside the mesh, Dlazy of them at least, GossipFactor of them
// above 4×Dlazy, and no more than MaxIHaveLength IDs an IHAVE.
func TestDirCostIHave(t *testing.T) {
	w, err := newWire(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	hb := time.Second
	if got := ihaveBps(0, 100, hb, w); got != 0 {
		t.Errorf("no non-mesh peers: %v B/s, want 0", got)
	}
	if a, b := ihaveBps(4, 100, hb, w), ihaveBps(10, 100, hb, w); !within(b/a, 6.0/4, 1e-9) {
		t.Errorf("10 non-mesh peers / 4 = %v, want 6/4 (Dlazy = 6)", b/a)
	}
	if a, b := ihaveBps(10, 100, hb, w), ihaveBps(1000, 100, hb, w); !within(b/a, 250.0/6, 1e-9) {
		t.Errorf("1,000 non-mesh peers / 10 = %v, want 250/6 (GossipFactor 0.25)", b/a)
	}
	if a, b := ihaveBps(10, 1e5, hb, w), ihaveBps(10, 1e6, hb, w); a != b {
		t.Errorf("IHAVE not capped at MaxIHaveLength: %v and %v B/s", a, b)
	}
}

// gossipCounter is a pubsub.RawTracer counting what one node receives on
// the directory topic: messages (copies included) and their bytes, IHAVE
// message IDs and their bytes, and its mesh size.
type gossipCounter struct {
	msgs, msgBytes, ihaveIDs, ihaveBytes, mesh atomic.Int64
	// dropped counts RPCs dropped on a full queue; direct, messages
	// received from their origin.
	dropped, direct atomic.Int64
}

var _ pubsub.RawTracer = (*gossipCounter)(nil)

func (c *gossipCounter) RecvRPC(rpc *pubsub.RPC) {
	for _, m := range rpc.Publish {
		if peer.ID(m.From) == rpc.From() {
			c.direct.Add(1)
		}
		c.msgs.Add(1)
		c.msgBytes.Add(int64(proto.Size(m)))
	}
	for _, ih := range rpc.GetControl().GetIhave() {
		c.ihaveIDs.Add(int64(len(ih.MessageIDs)))
		c.ihaveBytes.Add(int64(proto.Size(ih)))
	}
}
func (c *gossipCounter) Graft(peer.ID, string)                              { c.mesh.Add(1) }
func (c *gossipCounter) Prune(peer.ID, string)                              { c.mesh.Add(-1) }
func (*gossipCounter) OnNewOutboundStream(peer.ID, libp2pprotocol.ID)       {}
func (*gossipCounter) OnClosedOutboundStream(peer.ID)                       {}
func (*gossipCounter) AddPeer(peer.ID, libp2pprotocol.ID)                   {}
func (*gossipCounter) RemovePeer(peer.ID)                                   {}
func (*gossipCounter) Join(string)                                          {}
func (*gossipCounter) Leave(string)                                         {}
func (*gossipCounter) ValidateMessage(*pubsub.Message)                      {}
func (*gossipCounter) DeliverMessage(*pubsub.Message)                       {}
func (*gossipCounter) RejectMessage(*pubsub.Message, string)                {}
func (*gossipCounter) DuplicateMessage(*pubsub.Message)                     {}
func (*gossipCounter) ThrottlePeer(peer.ID)                                 {}
func (*gossipCounter) SendRPC(*pubsub.RPC, peer.ID)                         {}
func (*gossipCounter) SendRPCCompleted(*pubsub.RPC, peer.ID, time.Duration) {}
func (*gossipCounter) DropRPC(*pubsub.RPC, peer.ID)                         {}
func (*gossipCounter) UndeliverableMessage(*pubsub.Message)                 {}

// TestDirCostGossipSub checks the model's GossipSub arithmetic against
// go-libp2p-pubsub itself: 60 nodes on a mocknet, every one connected to
// every other (today's supernode tier), with the daemon's GossipSub
// parameters (node/dirdriver gossipParams at a 10 s interval) and
// flood publishing, each publishing a 100-byte message every 2 s (30 a
// second in all) for 10 s after 5 s of warm-up, in real time. It prints
// the copies of a message a node receives and the IHAVE message IDs it
// receives a second, measured and modelled (meanCopies over todayMesh;
// ihaveBps's formula with the measured mesh size). It fails when the
// measured IHAVE IDs are not within [0.4, 1.2] × the model's, or the
// measured copies not within [0.4, 1.1] × the model's (the model's are an
// upper bound: go-libp2p-pubsub measured 8.3–11.0 against 14.7 although
// ~98% of copies from origins arrived and the mesh was 15–17; the gap is
// not explained).
//
//	OVERLAYD_SIM_DIRCOST_GOSSIP=1 go test ./testnet/dircost -run TestDirCostGossipSub -v -count=1
func TestDirCostGossipSub(t *testing.T) {
	if os.Getenv("OVERLAYD_SIM_DIRCOST_GOSSIP") == "" {
		t.Skip("set OVERLAYD_SIM_DIRCOST_GOSSIP=1 (15 s of real time)")
	}
	const n, every, warm, measure = 60, 2 * time.Second, 5 * time.Second, 10 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Connect only once every node runs GossipSub: a node that connects
	// to one not yet running it never opens its stream to it.
	mn := mocknet.New()
	t.Cleanup(func() { _ = mn.Close() })
	for range n {
		if _, err := mn.GenPeer(); err != nil {
			t.Fatal(err)
		}
	}
	gp := pubsub.DefaultGossipSubParams()
	gp.D, gp.Dlo, gp.Dhi, gp.Dscore, gp.Dout = 8, 6, 4096, 4, 2
	gp.HeartbeatInterval = time.Second
	counters := make([]*gossipCounter, n)
	topics := make([]*pubsub.Topic, n)
	for i, h := range mn.Hosts() {
		counters[i] = &gossipCounter{}
		ps, err := pubsub.NewGossipSub(ctx, h, pubsub.WithFloodPublish(true), pubsub.WithGossipSubParams(gp),
			pubsub.WithRawTracer(counters[i]))
		if err != nil {
			t.Fatal(err)
		}
		if topics[i], err = ps.Join(protocol.DirectoryTopic); err != nil {
			t.Fatal(err)
		}
		sub, err := topics[i].Subscribe()
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				if _, err := sub.Next(ctx); err != nil {
					return
				}
			}
		}()
	}
	if err := mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	if err := mn.ConnectAllButSelf(); err != nil {
		t.Fatal(err)
	}
	var published atomic.Int64
	var measuring atomic.Bool
	var wg sync.WaitGroup
	for i := range topics {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			next := time.Duration(rng.Int64N(int64(every)))
			data := make([]byte, 100)
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(next):
				}
				if measuring.Load() {
					published.Add(1)
				}
				_ = topics[i].Publish(ctx, data)
				next = every - time.Duration(rng.Int64N(int64(every/10)))
			}
		}()
	}
	<-time.After(warm)
	var before []int64
	for _, c := range counters {
		before = append(before, c.msgs.Load(), c.ihaveIDs.Load())
	}
	measuring.Store(true)
	<-time.After(measure)
	measuring.Store(false)
	var dropped, direct, allMsgs float64
	for _, c := range counters {
		allMsgs += float64(c.msgs.Load())
		dropped += float64(c.dropped.Load())
		direct += float64(c.direct.Load())
	}
	t.Logf("whole run: %.0f messages received, %.0f from their origin; %.0f RPCs dropped", allMsgs, direct, dropped)
	var msgs, ids, mesh float64
	for i, c := range counters {
		msgs += float64(c.msgs.Load() - before[2*i])
		ids += float64(c.ihaveIDs.Load() - before[2*i+1])
		mesh += float64(c.mesh.Load())
	}
	cancel()
	wg.Wait()
	pub := float64(published.Load())
	copies := msgs / (pub * (n - 1))
	mesh /= n
	rate := pub / measure.Seconds()
	idsPerSec := ids / n / measure.Seconds()

	p := DefaultParams()
	rng := rand.New(rand.NewPCG(1, 1))
	g := todayMesh(n, p.Degree, rng)
	modelCopies := meanCopies(g, true, p, rng)
	nonMesh := float64(n-1) - mesh
	targets := min(nonMesh, max(float64(gp.Dlazy), gp.GossipFactor*nonMesh))
	modelIDs := targets * rate * float64(gp.HistoryGossip) * gp.HeartbeatInterval.Seconds() / gp.HeartbeatInterval.Seconds()
	t.Logf("published %.0f (%.1f/s); copies per message per node: measured %.2f, model %.2f (model mesh %.1f, measured %.1f)",
		pub, rate, copies, modelCopies, meanDegree(g), mesh)
	t.Logf("IHAVE message IDs received per node per second: measured %.0f, model %.0f", idsPerSec, modelIDs)
	// Measured on the loaded 2-core VM (two runs): IHAVE IDs 0.79 and
	// 1.00 × the model's; copies 8.3 and 11.0 against the model's 14.7
	// with a measured mesh of 15–17, so the model's copies are an upper
	// bound, by up to a half. Publishers fell behind (18–22 a second of
	// 30): the machine was loaded.
	if idsPerSec > 1.2*modelIDs || idsPerSec < 0.4*modelIDs {
		t.Errorf("IHAVE: go-libp2p-pubsub's %.0f IDs/s is not within [0.4, 1.2] × the model's %.0f", idsPerSec, modelIDs)
	}
	if copies > 1.1*modelCopies || copies < 0.4*modelCopies {
		t.Errorf("copies: go-libp2p-pubsub's %.2f is not within [0.4, 1.1] × the model's %.2f", copies, modelCopies)
	}
}
