package viewclient

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/overlay/view"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// t0 is the tests' clock: every announcement is issued then, and the
// client's clock reads it.
var t0 = time.Unix(1_800_000_000, 0)

// tier is a tier of supernodes on a mocknet, without nodes: each a
// host whose view handler answers from the tier's whole directory and
// ring (view.Build, as supernode.ViewServer does), through its tamper.
type tier struct {
	mn  mocknet.Mocknet
	sns []*supernode
	dir *directory.Directory // every supernode's announcement
	r   *ring.Ring           // the tier's ring
	seq atomic.Int32         // mocknet listen ports
}

type supernode struct {
	h      host.Host
	priv   crypto.PrivKey
	asked  atomic.Int32 // view requests answered
	mu     sync.Mutex
	rng    *rand.Rand
	tamper func(req *pb.ViewRequest, resp *pb.ViewResponse)
	reqs   []*pb.ViewRequest
}

// newTier starts k supernodes of capacity capacity, each announcing an
// address of its own subnet, and builds their ring.
func newTier(t *testing.T, k int, capacity uint32) *tier {
	t.Helper()
	n := &tier{mn: mocknet.New(), dir: directory.New()}
	t.Cleanup(func() { _ = n.mn.Close() })
	for i := range k {
		priv, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		h := n.addHost(t, priv)
		sn := &supernode{h: h, priv: priv, rng: rand.New(rand.NewPCG(uint64(i), 1))}
		a := protocol.Announcement{ID: h.ID(), Addrs: []ma.Multiaddr{ma.StringCast(fmt.Sprintf("/ip4/8.%d.0.1/tcp/4001", i+1))},
			Role: protocol.RoleSupernode, Capacity: capacity, Version: protocol.Version, Seq: 1, Interval: 10 * time.Second, Issued: t0}
		if _, err := n.dir.ReceiveSigned(signAnnouncement(t, priv, a), t0); err != nil {
			t.Fatal(err)
		}
		h.SetStreamHandler(protocol.ViewID, func(s network.Stream) { n.serve(sn, s) })
		n.sns = append(n.sns, sn)
	}
	r, err := ring.New(cluster.Members(n.dir.Snapshot(), t0, cluster.Policy{}))
	if err != nil {
		t.Fatal(err)
	}
	n.r = r
	return n
}

func (n *tier) addHost(t *testing.T, priv crypto.PrivKey) host.Host {
	t.Helper()
	if priv == nil {
		var err error
		if priv, _, err = crypto.GenerateEd25519Key(nil); err != nil {
			t.Fatal(err)
		}
	}
	h, err := n.mn.AddPeer(priv, ma.StringCast(fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", 20000+n.seq.Add(1))))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	return h
}

// serve answers one view request as a serving supernode does.
func (n *tier) serve(sn *supernode, s network.Stream) {
	defer s.Close()
	req := &pb.ViewRequest{}
	if err := protocol.NewFrameReader(s, protocol.MaxViewFrame).Read(req); err != nil {
		s.Reset()
		return
	}
	have := map[peer.ID]uint64{}
	for _, h := range req.GetHave() {
		have[peer.ID(h.GetPeerId())] = h.GetSeq()
	}
	sn.mu.Lock()
	resp := view.Build(n.r, n.dir.Snapshot(), req.GetKeys(), have, req.GetNeighboursOnly(), sn.rng)
	tamper := sn.tamper
	sn.reqs = append(sn.reqs, req)
	sn.mu.Unlock()
	if tamper != nil {
		tamper(req, resp)
	}
	sn.asked.Add(1)
	_ = protocol.WriteFrame(s, resp)
}

func (sn *supernode) setTamper(f func(req *pb.ViewRequest, resp *pb.ViewResponse)) {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	sn.tamper = f
}

func (n *tier) ids() []peer.ID {
	var out []peer.ID
	for _, sn := range n.sns {
		out = append(out, sn.h.ID())
	}
	return out
}

// signAnnouncement is a as the signed GossipSub message of priv.
func signAnnouncement(tb testing.TB, priv crypto.PrivKey, a protocol.Announcement) []byte {
	tb.Helper()
	data, err := a.Marshal()
	if err != nil {
		tb.Fatal(err)
	}
	from, _ := peer.IDFromPrivateKey(priv)
	m := &pubsubpb.Message{From: []byte(from), Data: data, Seqno: []byte{1, 2, 3}, Topic: proto.String(protocol.DirectoryTopic)}
	b, _ := proto.Marshal(m)
	if m.Signature, err = priv.Sign(append([]byte("libp2p-pubsub:"), b...)); err != nil {
		tb.Fatal(err)
	}
	out, _ := proto.Marshal(m)
	return out
}

// forgeSigned rewrites the announcement in a signed directory message,
// keeping the signature.
func forgeSigned(t testing.TB, signed []byte, f func(a *protocol.Announcement)) []byte {
	t.Helper()
	var m pubsubpb.Message
	if err := proto.Unmarshal(signed, &m); err != nil {
		t.Fatal(err)
	}
	a, err := protocol.UnmarshalAnnouncement(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	f(&a)
	if m.Data, err = a.Marshal(); err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// session is a client side that is attached where the test says.
type session struct {
	mu         sync.Mutex
	sn         peer.ID
	groups     []string
	distrusted []peer.ID
}

var _ Session = (*session)(nil)

func (s *session) Supernode() (peer.ID, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sn, s.sn != ""
}

func (s *session) Groups() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.groups)
}

func (s *session) Distrust(p peer.ID, _ time.Duration, _ string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.distrusted = append(s.distrusted, p)
	if s.sn == p {
		s.sn = "" // the client side leaves it
	}
}

func (s *session) distrustedNow() []peer.ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.distrusted)
}

// viewer is a Client on a host of its own in net, with what it was given.
type viewer struct {
	*Client
	h     host.Host
	s     *session
	dir   *directory.Directory
	rings *ring.Published
	reg   *prometheus.Registry
	pubs  atomic.Int32 // rings published
}

// newViewer builds a Client on a new host of net, attached to sn (if not
// nil), with bootstrap peers boot.
func newViewer(t *testing.T, net *tier, sn *supernode, boot []peer.AddrInfo) *viewer {
	t.Helper()
	priv, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	v := &viewer{h: net.addHost(t, priv), s: &session{}, dir: directory.New(), rings: &ring.Published{}, reg: prometheus.NewRegistry()}
	if sn != nil {
		v.s.sn = sn.h.ID()
	}
	m, err := NewMetrics(v.reg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{
		Host: v.h, Dir: v.dir, Rings: v.rings, Session: v.s, Bootstrap: boot,
		Publish: func(ms []ring.Member, _ string) {
			r, err := ring.New(ms)
			if err != nil {
				t.Errorf("ring of the view: %v", err)
				return
			}
			v.rings.Publish(r)
			v.pubs.Add(1)
		},
		AnnounceInterval: time.Second,
		Now:              func() time.Time { return t0 },
		Rand:             rand.New(rand.NewPCG(7, 7)),
		Log:              slog.New(slog.DiscardHandler),
		Metrics:          m,
	})
	if err != nil {
		t.Fatal(err)
	}
	v.Client = c
	return v
}

// refresh runs one refresh, as Run does, and fails the test when no
// supernode answered.
func (v *viewer) mustRefresh(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !v.refresh(ctx) {
		t.Fatal("no supernode answered the view request")
	}
}

// home is the viewer's home cluster by its published ring.
func (v *viewer) home() []peer.ID {
	r := v.rings.Load()
	if r == nil {
		return nil
	}
	return cluster.Home(r, []byte(v.h.ID()))
}

func (v *viewer) verdicts(verdict view.Verdict) float64 {
	return testutil.ToFloat64(v.m.checks.WithLabelValues(verdict.String()))
}

func (v *viewer) fetches(purpose, result string) float64 {
	return testutil.ToFloat64(v.m.fetches.WithLabelValues(purpose, result))
}

func (v *viewer) entries(result string) float64 {
	return testutil.ToFloat64(v.m.entries.WithLabelValues(result))
}
