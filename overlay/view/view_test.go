package view

import (
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"testing"
	"time"

	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

var t0 = time.Unix(1_800_000_000, 0)

// supernode is a test supernode: its key and its announcements, signed
// as GossipSub signs them.
type supernode struct {
	priv crypto.PrivKey
	id   peer.ID
	seq  uint64
	role protocol.Role
	cap  uint32
	load uint32
}

func newSupernode(tb testing.TB, capacity uint32, i int) *supernode {
	tb.Helper()
	priv, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(priv)
	return &supernode{priv: priv, id: id, role: protocol.RoleSupernode, cap: capacity, load: uint32(i % 7)}
}

// signed is the next announcement of s, as a signed GossipSub message of
// signer (s itself unless a forger is given).
func (s *supernode) signed(tb testing.TB, signer crypto.PrivKey) []byte {
	tb.Helper()
	s.seq++
	a := protocol.Announcement{ID: s.id, Addrs: []ma.Multiaddr{ma.StringCast(fmt.Sprintf("/ip4/10.%d.%d.1/tcp/4001", s.seq%200, len(s.id)%200))},
		Role: s.role, Capacity: s.cap, Load: s.load, Version: protocol.Version, Seq: s.seq, Interval: 10 * time.Second, Issued: t0}
	data, err := a.Marshal()
	if err != nil {
		tb.Fatal(err)
	}
	if signer == nil {
		signer = s.priv
	}
	from, _ := peer.IDFromPrivateKey(signer)
	m := &pubsubpb.Message{From: []byte(from), Data: data, Seqno: []byte{1, 2, 3}, Topic: proto.String(protocol.DirectoryTopic)}
	b, _ := proto.Marshal(m)
	if m.Signature, err = signer.Sign(append([]byte("libp2p-pubsub:"), b...)); err != nil {
		tb.Fatal(err)
	}
	out, _ := proto.Marshal(m)
	return out
}

// server is a supernode's whole directory and its ring.
type server struct {
	dir *directory.Directory
	r   *ring.Ring
}

func newServer(tb testing.TB, sns []*supernode) *server {
	tb.Helper()
	s := &server{dir: directory.New()}
	for _, sn := range sns {
		if _, err := s.dir.ReceiveSigned(sn.signed(tb, nil), t0); err != nil {
			tb.Fatal(err)
		}
	}
	s.rebuild(tb)
	return s
}

func (s *server) rebuild(tb testing.TB) {
	tb.Helper()
	r, err := ring.New(cluster.Members(s.dir.Snapshot(), t0, cluster.Policy{}))
	if err != nil {
		tb.Fatal(err)
	}
	s.r = r
}

// client applies a view's signed entries to its own directory, as the
// node does, and returns its members.
func clientOf(tb testing.TB, dir *directory.Directory, resp *pb.ViewResponse) []ring.Member {
	tb.Helper()
	for _, ve := range resp.GetEntries() {
		if len(ve.GetSigned()) > 0 {
			if _, err := dir.ReceiveSigned(ve.GetSigned(), t0); err != nil && protocol.ReasonOf(err) != protocol.ReasonStaleSeq {
				tb.Fatal(err)
			}
		}
	}
	return Members(resp, dir)
}

func randomKey(rng *mrand.Rand) []byte {
	k := make([]byte, 34)
	for i := range k {
		k[i] = byte(rng.IntN(256))
	}
	return k
}

func newSupernodes(tb testing.TB, n int, rng *mrand.Rand) []*supernode {
	var sns []*supernode
	for i := range n {
		sns = append(sns, newSupernode(tb, uint32(10+rng.IntN(500)), i))
	}
	return sns
}

// TestViewHomeIsTheServers: for random keys, the home cluster a client
// computes from a view equals the one the server computes from its whole
// ring, also for groups (the ring owner), before and after the ring
// changes (members leave and join, one changes capacity), and for the
// union of views of several keys (a client's own key and its groups').
func TestViewHomeIsTheServers(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(1, 2))
	sns := newSupernodes(t, 60, rng)
	srv := newServer(t, sns)
	check := func(phase string) {
		t.Helper()
		for range 300 {
			key := randomKey(rng)
			cdir := directory.New()
			ms := clientOf(t, cdir, Build(srv.r, srv.dir.Snapshot(), [][]byte{key}, nil, false, rng))
			if got, want := Home(ms, key), cluster.Home(srv.r, key); !slices.Equal(got, want) {
				t.Fatalf("%s: key %x: view home %v, server home %v", phase, key[:4], got, want)
			}
		}
		// Several keys at once: one ring from the union of their views.
		keys := [][]byte{randomKey(rng)}
		for i := range protocol.MaxViewKeys - 1 {
			keys = append(keys, fmt.Appendf(nil, "group-%d-%d", i, rng.IntN(1000)))
		}
		cdir := directory.New()
		resp := Build(srv.r, srv.dir.Snapshot(), keys, nil, false, rng)
		if len(resp.Entries) > protocol.MaxViewEntries {
			t.Fatalf("%d entries, limit %d", len(resp.Entries), protocol.MaxViewEntries)
		}
		r, err := ring.New(clientOf(t, cdir, resp))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if got, want := cluster.Home(r, k), cluster.Home(srv.r, k); !slices.Equal(got, want) {
				t.Fatalf("%s: union of %d views: key %q home %v, server's %v", phase, len(keys), k, got, want)
			}
			gh, _ := cluster.GroupHome(r, string(k))
			want, _ := cluster.GroupHome(srv.r, string(k))
			if gh != want {
				t.Fatalf("%s: group %q home %s, server's %s", phase, k, gh, want)
			}
		}
	}
	check("initial ring")
	before := srv.r.Version()
	// The ring changes: 8 leave, 8 join, one grows.
	for _, sn := range sns[:8] {
		sn.seq++
		a := protocol.Announcement{ID: sn.id, Role: protocol.RoleSupernode, Capacity: 1, Version: protocol.Version, Seq: sn.seq + 100,
			Interval: 10 * time.Second, Departing: true, Addrs: []ma.Multiaddr{ma.StringCast("/ip4/10.0.0.1/tcp/1")}}
		if _, err := srv.dir.Apply(sn.id, a, t0); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 8 {
		sn := newSupernode(t, uint32(10+rng.IntN(500)), i)
		if _, err := srv.dir.ReceiveSigned(sn.signed(t, nil), t0); err != nil {
			t.Fatal(err)
		}
	}
	sns[20].cap *= 4
	if _, err := srv.dir.ReceiveSigned(sns[20].signed(t, nil), t0); err != nil {
		t.Fatal(err)
	}
	srv.rebuild(t)
	if srv.r.Version() == before {
		t.Fatal("the ring did not change")
	}
	check("changed ring")
}

// TestViewOmissionChangesHome: a server that omits a home member gives
// a view whose home differs (which is what the cross-check detects), and
// Judge outvotes it when two honest views agree.
func TestViewOmissionChangesHome(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(3, 4))
	srv := newServer(t, newSupernodes(t, 30, rng))
	key := randomKey(rng)
	honest := Build(srv.r, srv.dir.Snapshot(), [][]byte{key}, nil, true, rng)
	want := cluster.Home(srv.r, key)
	// Omit the key's owner.
	lying := &pb.ViewResponse{RingVersion: honest.RingVersion}
	for _, e := range honest.Entries {
		if peer.ID(e.PeerId) != want[0] {
			lying.Entries = append(lying.Entries, e)
		}
	}
	cdir := directory.New()
	liar := Home(clientOf(t, cdir, lying), key)
	if slices.Equal(liar, want) || slices.Contains(liar, want[0]) {
		t.Fatalf("omitting the owner left the home %v (server's %v)", liar, want)
	}
	good := Home(clientOf(t, directory.New(), honest), key)
	if !slices.Equal(good, want) {
		t.Fatalf("honest view home %v, want %v", good, want)
	}
	liarRing := onRing(Members(lying, cdir))
	honestRing := onRing(clientOf(t, directory.New(), honest))
	// The owner and the second home member answer the check.
	owner, second := Opinion{Server: want[0], Home: good}, Opinion{Server: want[1], Home: good}
	if v := Judge(liar, liarRing, []Opinion{owner, second}); v != Outvoted {
		t.Fatalf("two honest views against the liar, the omitted owner among them: %v, want outvoted", v)
	}
	if v := Judge(liar, liarRing, []Opinion{{Server: want[1], Home: good}, {Server: want[2], Home: good}}); v != Undecided {
		t.Fatalf("the omitted owner did not answer (it may be dead): %v, want undecided", v)
	}
	if v := Judge(good, honestRing, []Opinion{owner}); v != Agree {
		t.Fatalf("agreeing views: %v", v)
	}
	if v := Judge(liar, liarRing, []Opinion{owner}); v != Undecided {
		t.Fatalf("one view against one: %v, want undecided (a second opinion is needed)", v)
	}
	if v := Judge(liar, liarRing, []Opinion{owner, {Server: want[2], Home: liar}, second}); v != Undecided {
		t.Fatalf("one backer of the primary: %v, want undecided", v)
	}
}

// TestViewWeightsAloneNotOutvoted: a server whose ring weights differ
// from the others' (as an honest supernode's do while it ramps a
// newcomer, for a whole ramp period) but that holds every member gives
// another home, and Judge leaves it undecided however many disagree.
func TestViewWeightsAloneNotOutvoted(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(9, 10))
	srv := newServer(t, newSupernodes(t, 30, rng))
	// A key whose home moves when its owner's weight drops to 1 (the
	// identities are random, so not every key's does).
	var (
		key   []byte
		want  []peer.ID
		ms    []ring.Member
		moved bool
	)
	for range 100 {
		key = randomKey(rng)
		honest := Build(srv.r, srv.dir.Snapshot(), [][]byte{key}, nil, true, rng)
		want = cluster.Home(srv.r, key)
		ramping := proto.Clone(honest).(*pb.ViewResponse)
		for _, e := range ramping.Entries {
			if peer.ID(e.PeerId) == want[0] {
				e.Weight = 1 // as a supernode that first saw the owner a moment ago
			}
		}
		ms = clientOf(t, directory.New(), ramping)
		if moved = !slices.Equal(Home(ms, key), want); moved {
			break
		}
	}
	if !moved {
		t.Fatal("no key of 100 whose home moves with its owner's weight")
	}
	got := Home(ms, key)
	ops := []Opinion{{Server: want[0], Home: want}, {Server: want[1], Home: want}, {Server: want[2], Home: want}}
	if v := Judge(got, onRing(ms), ops); v != Undecided {
		t.Fatalf("weights alone: %v, want undecided", v)
	}
}

func onRing(ms []ring.Member) func(peer.ID) bool {
	return func(p peer.ID) bool {
		return slices.ContainsFunc(ms, func(m ring.Member) bool { return m.ID == p.String() })
	}
}

// TestViewCannotForge: an entry whose signature does not verify, or that
// another key signed, is refused by the client's directory; Members
// leaves out entries the client does not hold; a weight above any
// honest one is capped.
func TestViewCannotForge(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(5, 6))
	sns := newSupernodes(t, 10, rng)
	srv := newServer(t, sns)
	cdir := directory.New()
	forger, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	if _, err := cdir.ReceiveSigned(sns[0].signed(t, forger), t0); protocol.ReasonOf(err) != protocol.ReasonSignerMismatch {
		t.Fatalf("announcement of %s signed by another key: %v, want signer_mismatch", sns[0].id.ShortString(), err)
	}
	good := sns[1].signed(t, nil)
	bad := slices.Clone(good)
	bad[len(bad)-1] ^= 1 // the signature's last byte
	if _, err := cdir.ReceiveSigned(bad, t0); protocol.ReasonOf(err) != protocol.ReasonBadSignature {
		t.Fatalf("flipped signature: %v, want bad_signature", err)
	}
	if cdir.Snapshot().Len() != 0 {
		t.Fatal("a refused entry entered the directory")
	}
	resp := Build(srv.r, srv.dir.Snapshot(), [][]byte{[]byte(sns[2].id)}, nil, false, rng)
	if ms := Members(resp, cdir); len(ms) != 0 {
		t.Fatalf("members the client does not hold: %v", ms)
	}
	clientOf(t, cdir, resp)
	for _, e := range resp.Entries {
		e.Weight = 1 << 30
	}
	for _, m := range Members(resp, cdir) {
		if m.Weight > cluster.MaxWeight {
			t.Fatalf("weight %d kept, cap %d", m.Weight, cluster.MaxWeight)
		}
	}
}

// TestViewHaveOmitsSigned: entries the client holds at the same seq carry
// no signed message (no bytes, no signature check); a newer one does.
func TestViewHaveOmitsSigned(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(7, 8))
	sns := newSupernodes(t, 20, rng)
	srv := newServer(t, sns)
	key := randomKey(rng)
	first := Build(srv.r, srv.dir.Snapshot(), [][]byte{key}, nil, true, rng)
	have := map[peer.ID]uint64{}
	for _, e := range first.Entries {
		if len(e.Signed) == 0 {
			t.Fatal("a first view entry without its signed message")
		}
		have[peer.ID(e.PeerId)] = e.Seq
	}
	again := Build(srv.r, srv.dir.Snapshot(), [][]byte{key}, have, true, rng)
	for _, e := range again.Entries {
		if len(e.Signed) != 0 {
			t.Fatalf("entry %s sent again at the seq the client holds", peer.ID(e.PeerId).ShortString())
		}
	}
	if proto.Size(again) >= proto.Size(first)/3 {
		t.Fatalf("a view of held entries is %d bytes, the first %d", proto.Size(again), proto.Size(first))
	}
	// One supernode announces again: only its entry carries a message.
	moved := peer.ID(first.Entries[0].PeerId)
	for _, sn := range sns {
		if sn.id == moved {
			if _, err := srv.dir.ReceiveSigned(sn.signed(t, nil), t0); err != nil {
				t.Fatal(err)
			}
		}
	}
	third := Build(srv.r, srv.dir.Snapshot(), [][]byte{key}, have, true, rng)
	for _, e := range third.Entries {
		if (len(e.Signed) > 0) != (peer.ID(e.PeerId) == moved) {
			t.Fatalf("entry %s: signed %d bytes; only %s re-announced", peer.ID(e.PeerId).ShortString(), len(e.Signed), moved.ShortString())
		}
	}
}

// TestViewSparesAndMegas: a full view carries spares with room (never a
// full supernode) and the megas, each entry once.
func TestViewSparesAndMegas(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(9, 10))
	sns := newSupernodes(t, 40, rng)
	for i, sn := range sns {
		if i%2 == 0 {
			sn.load = sn.cap // full
		}
	}
	srv := newServer(t, sns)
	key := randomKey(rng)
	resp := Build(srv.r, srv.dir.Snapshot(), [][]byte{key}, nil, false, rng)
	neigh := srv.r.LookupN(key, Neighbours, nil)
	seen := map[string]bool{}
	spares := 0
	for _, e := range resp.Entries {
		id := peer.ID(e.PeerId)
		if seen[id.String()] {
			t.Fatalf("entry %s twice", id.ShortString())
		}
		seen[id.String()] = true
		if slices.Contains(neigh, id.String()) {
			continue
		}
		spares++
		if en, _ := srv.dir.Snapshot().Get(id); cluster.Spare(en) == 0 {
			t.Fatalf("spare %s has no room", id.ShortString())
		}
	}
	if spares == 0 || spares > Spares {
		t.Fatalf("%d spares, want 1 to %d", spares, Spares)
	}
	for _, id := range neigh {
		if !seen[id] {
			t.Fatalf("neighbour %s missing", id)
		}
	}
}

// TestSampleSparesWeighted: the first spare drawn follows the spare
// capacities (1:3:6), and a draw never repeats a supernode.
func TestSampleSparesWeighted(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(11, 12))
	var sns []*supernode
	for i, spare := range []uint32{1, 3, 6} {
		sn := newSupernode(t, 100, i)
		sn.load = 100 - spare
		sns = append(sns, sn)
	}
	srv := newServer(t, sns)
	ix := NewIndex(srv.r, srv.dir.Snapshot())
	first := map[peer.ID]int{}
	const n = 6000
	for range n {
		got := ix.sampleSpares(rng)
		if len(got) != 3 {
			t.Fatalf("drew %d of 3 supernodes with room", len(got))
		}
		if got[0] == got[1] || got[1] == got[2] || got[0] == got[2] {
			t.Fatalf("repeat in %v", got)
		}
		first[ix.spares[got[0]]]++
	}
	for _, sn := range sns {
		want := float64(100-sn.load) / 10
		if got := float64(first[sn.id]) / n; got < want-0.03 || got > want+0.03 {
			t.Errorf("supernode with spare %d drawn first %.3f of the time, want %.2f", 100-sn.load, got, want)
		}
	}
}

// TestSampleSparesLarge: above 8 × Spares supernodes with room, the draw
// by cumulative spare follows the capacities too.
func TestSampleSparesLarge(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(13, 14))
	var sns []*supernode
	for i := range 100 {
		sn := newSupernode(t, 100, i)
		sn.load = 99 // spare 1
		if i == 0 {
			sn.load = 0 // spare 100: as much as the other 99 together
		}
		sns = append(sns, sn)
	}
	srv := newServer(t, sns)
	ix := NewIndex(srv.r, srv.dir.Snapshot())
	big := 0
	const n = 4000
	for range n {
		got := ix.sampleSpares(rng)
		if len(got) != Spares {
			t.Fatalf("drew %d, want %d", len(got), Spares)
		}
		seen := map[int]bool{}
		for _, i := range got {
			if seen[i] {
				t.Fatalf("repeat in %v", got)
			}
			seen[i] = true
		}
		if ix.spares[got[0]] == sns[0].id {
			big++
		}
	}
	if f := float64(big) / n; f < 100.0/199-0.03 || f > 100.0/199+0.03 {
		t.Fatalf("the supernode with half the room drawn first %.3f of the time, want %.3f", f, 100.0/199)
	}
}

// TestIndexServesCurrentEntries: an index kept across announcements (a
// view server rebuilds it at most once a second) serves each entry as the
// current snapshot holds it, so a client's entries do not expire under an
// announce interval shorter than the index's age.
func TestIndexServesCurrentEntries(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(15, 16))
	sns := newSupernodes(t, 5, rng)
	srv := newServer(t, sns)
	ix := NewIndex(srv.r, srv.dir.Snapshot())
	for _, sn := range sns {
		if _, err := srv.dir.ReceiveSigned(sn.signed(t, nil), t0); err != nil {
			t.Fatal(err)
		}
	}
	cur := srv.dir.Snapshot()
	resp := ix.Build(cur, [][]byte{randomKey(rng)}, nil, false, rng)
	if len(resp.Entries) != len(sns) {
		t.Fatalf("%d entries, want %d", len(resp.Entries), len(sns))
	}
	for _, e := range resp.Entries {
		if now, _ := cur.Get(peer.ID(e.PeerId)); e.Seq != now.Seq {
			t.Fatalf("entry %s at seq %d, the snapshot holds %d", peer.ID(e.PeerId).ShortString(), e.Seq, now.Seq)
		}
	}
}
