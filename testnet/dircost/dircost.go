package dircost

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/overlay/view"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/testnet/synthid"
	"github.com/overlayd/overlayd/testnet/vtime"
)

// Params are the directory-cost model's inputs.
type Params struct {
	// Seed fixes every random draw: the same params give the same rows.
	Seed uint64
	// Base is the configured announce interval (the daemon's default:
	// 10 s).
	Base time.Duration
	// Intervals is how many announce intervals are measured, after two
	// of warm-up.
	Intervals int
	// Origins is how many announcements' gossip is followed through the
	// supernode tier, from random origins.
	Origins int
	// Degree is GossipSub's D (node/dirdriver gossipParams: 8).
	Degree int
	// LatencyMin and LatencyMax bound a link's one-way latency (uniform,
	// fixed per link): they decide which copy of a message arrives first.
	LatencyMin, LatencyMax time.Duration
	// Clients is how many ordinary nodes of the view design are simulated.
	Clients int
	// ClientsPerSupernode is the ordinary nodes each supernode serves a
	// view to (and cross-checks for): 100, the skype2010 scenario's ratio.
	ClientsPerSupernode int
	// Megas is how many of the tier's announcers are mega-supernodes
	// (whose announcements carry an operator certificate: two checks).
	Megas int
	// MaxDirectory bounds the real directory the view clients are served
	// from: a view's content does not depend on the tier's size beyond
	// it (the ring holds at most cluster.MaxMembers anyway), and building
	// 100,000 signed entries would be most of the run.
	MaxDirectory int
	// CrossCheckDelay is how long after a refresh its cross-check is
	// answered (a new stream to a second supernode).
	CrossCheckDelay time.Duration
	// VerifyCost is the CPU of one announcement check (testnet
	// BenchmarkCostVerify, mode=open: 45 µs).
	VerifyCost time.Duration
	// Heartbeat is GossipSub's heartbeat on the supernodes (node's
	// gossipParams: a quarter of the announce interval within
	// [100 ms, 1 s]; 1 s at the default 10 s).
	Heartbeat time.Duration
}

// DefaultParams returns the params the figures in docs/bench-log/directory.md
// ("At scale, from the simulator") were made with.
func DefaultParams() Params {
	return Params{
		Seed:                1,
		Base:                10 * time.Second,
		Intervals:           3,
		Origins:             8,
		Degree:              8,
		LatencyMin:          10 * time.Millisecond,
		LatencyMax:          150 * time.Millisecond,
		Clients:             1000,
		ClientsPerSupernode: 100,
		Megas:               view.MaxMegas,
		MaxDirectory:        2000,
		CrossCheckDelay:     500 * time.Millisecond,
		VerifyCost:          45 * time.Microsecond,
		Heartbeat:           time.Second,
	}
}

// Validate reports the first param out of range.
func (p Params) Validate() error {
	switch {
	case p.Base < protocol.MinAnnounceInterval || p.Base > protocol.MaxAnnounceInterval:
		return fmt.Errorf("dircost: Base %v outside [%v, %v]", p.Base, protocol.MinAnnounceInterval, protocol.MaxAnnounceInterval)
	case p.Intervals < 1 || p.Origins < 1 || p.Clients < 1:
		return fmt.Errorf("dircost: Intervals, Origins and Clients must be >= 1")
	case p.Degree < 2 || p.Degree%2 != 0:
		return fmt.Errorf("dircost: Degree must be even and >= 2, got %d", p.Degree)
	case p.LatencyMin <= 0 || p.LatencyMax < p.LatencyMin:
		return fmt.Errorf("dircost: need 0 < LatencyMin <= LatencyMax")
	case p.Heartbeat <= 0:
		return fmt.Errorf("dircost: Heartbeat must be > 0")
	case p.ClientsPerSupernode < 0 || p.Megas < 0 || p.CrossCheckDelay < 0 || p.VerifyCost < 0:
		return fmt.Errorf("dircost: ClientsPerSupernode, Megas, CrossCheckDelay and VerifyCost must be >= 0")
	case p.MaxDirectory < p.Megas+view.Neighbours+view.Spares:
		return fmt.Errorf("dircost: MaxDirectory must hold the megas and a full view")
	}
	return nil
}

// Designs compared.
const (
	DesignToday = "today" // every node on the announcement topic
	DesignView  = "view"  // the topic among supernodes, views for the rest
)

// Row is the directory's cost at one tier size under one design.
// Rates are per second of virtual time, received (not sent); checks are
// Ed25519 verifications (a mega's announcement: two, message and
// certificate).
type Row struct {
	Supernodes int
	Design     string
	// Interval is the announce interval every supernode uses.
	Interval time.Duration
	// Per ordinary node.
	OrdinaryBps, OrdinaryChecks float64
	// Per supernode: SupernodeBps is GossipBps (announcements) +
	// IHaveBps (GossipSub's IHAVE gossip, analytic: ihaveBps) + ViewBps
	// (the view requests of its clients, as primary and as checker).
	SupernodeBps, SupernodeChecks float64
	GossipBps, IHaveBps, ViewBps  float64
	// Copies is how many copies of one announcement a supernode receives
	// on average (the first is checked, the rest the seen-cache drops).
	Copies float64
	// OrdinaryCPU and SupernodeCPU are the checks' share of one core.
	OrdinaryCPU, SupernodeCPU float64
	// View design only: per refresh (with its cross-check), the bytes an
	// ordinary node receives and the checks it makes; and the bytes it
	// sends a second (its requests).
	RefreshBytes, RefreshChecks float64
	OrdinarySentBps             float64
}

// Compute runs the model at each tier size (announcers, megas
// included) and returns a today row and a view row per size, in order.
func Compute(sizes []int, p Params) ([]Row, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	w, err := newWire(p.Base)
	if err != nil {
		return nil, err
	}
	var rows []Row
	for _, s := range sizes {
		if s < p.Megas+view.Neighbours+view.Spares {
			return nil, fmt.Errorf("dircost: %d supernodes cannot fill a view", s)
		}
		rng := rand.New(rand.NewPCG(p.Seed, uint64(s)))
		today := costToday(s, p, w, rng)
		v, err := costView(s, p, w, rng)
		if err != nil {
			return nil, err
		}
		rows = append(rows, today, v)
	}
	return rows, nil
}

// costToday is today's design at s supernodes: each announces every Base;
// an ordinary node, a leaf in its supernode's mesh, receives each
// announcement once and checks it; a supernode, connected to every other
// (node/dirdriver meshLoop), receives the origin's flood-published copy and one from
// each mesh peer (todayMesh) that forwards it.
func costToday(s int, p Params, w wire, rng *rand.Rand) Row {
	rate := announceRate(s, p.Base, p, rng)
	g := todayMesh(s, p.Degree, rng)
	copies := meanCopies(g, true, p, rng)
	row := Row{Supernodes: s, Design: DesignToday, Interval: p.Base, Copies: copies}
	row.OrdinaryChecks = rate * checksPerAnnouncement(s, p.Megas)
	row.OrdinaryBps = rate * w.meanRPC(s, p.Megas)
	row.SupernodeChecks = row.OrdinaryChecks * float64(s-1) / float64(s)
	row.GossipBps = rate * copies * w.meanRPC(s, p.Megas)
	row.IHaveBps = ihaveBps(float64(s-1)-meanDegree(g), rate, p.Heartbeat, w)
	row.SupernodeBps = row.GossipBps + row.IHaveBps
	return row.withCPU(p)
}

// costView is the view design at s supernodes: they announce every
// protocol.AnnounceInterval(Base, s) through a bounded mesh of degree
// Degree (boundedMesh); ordinary nodes refresh their views (viewClients).
func costView(s int, p Params, w wire, rng *rand.Rand) (Row, error) {
	iv := protocol.AnnounceInterval(p.Base, s)
	rate := announceRate(s, iv, p, rng)
	copies := meanCopies(boundedMesh(s, p.Degree, rng), false, p, rng)
	vc, err := viewClients(min(s, p.MaxDirectory), iv, p, w, rng)
	if err != nil {
		return Row{}, err
	}
	row := Row{Supernodes: s, Design: DesignView, Interval: iv, Copies: copies}
	row.OrdinaryBps, row.OrdinaryChecks = vc.recvBps, vc.checks
	row.RefreshBytes, row.RefreshChecks = vc.refreshBytes, vc.refreshChecks
	row.OrdinarySentBps = vc.sentBps
	row.SupernodeChecks = rate * checksPerAnnouncement(s, p.Megas) * float64(s-1) / float64(s)
	row.GossipBps = rate * copies * w.meanRPC(s, p.Megas)
	// A supernode's topic peers are its mesh peers: no IHAVE.
	row.ViewBps = float64(p.ClientsPerSupernode) * vc.sentBps
	row.SupernodeBps = row.GossipBps + row.ViewBps
	return row.withCPU(p), nil
}

// checksPerAnnouncement is the mean Ed25519 checks of one announcement of
// a tier of s with megas megas: one, two for a mega's.
func checksPerAnnouncement(s, megas int) float64 {
	return 1 + float64(min(megas, s))/float64(s)
}

// withCPU sets the CPU shares from the checks.
func (r Row) withCPU(p Params) Row {
	r.OrdinaryCPU = r.OrdinaryChecks * p.VerifyCost.Seconds()
	r.SupernodeCPU = r.SupernodeChecks * p.VerifyCost.Seconds()
	return r
}

// announceRate is how many announcements a second s announcers on
// interval iv make, counted from their schedules over p.Intervals
// intervals after two of warm-up.
func announceRate(s int, iv time.Duration, p Params, rng *rand.Rand) float64 {
	from, to := 2*int64(iv), int64(2+p.Intervals)*int64(iv)
	var q vtime.Queue[event]
	for i := range s {
		schedule(&q, event{at: 0, k: evAnnounce, a: int32(i)})
	}
	var n int
	for q.Len() > 0 {
		_, e := q.Pop()
		if e.at >= to {
			break
		}
		if e.at >= from {
			n++
		}
		e.at += int64(nextAnnounce(iv, e.gen == 0, rng))
		e.gen = 1
		schedule(&q, e)
	}
	return float64(n) / time.Duration(to-from).Seconds()
}

// nextAnnounce is the wait before a supernode's next announcement, as
// node's announceSchedule draws it: after the first, a uniform point of
// the next interval; after that, the interval less up to 10%.
func nextAnnounce(iv time.Duration, first bool, rng *rand.Rand) time.Duration {
	if first {
		return 1 + time.Duration(rng.Int64N(int64(iv)))
	}
	return iv - time.Duration(rng.Int64N(int64(iv/10)+1))
}

// wire is what messages cost on the wire, in bytes.
type wire struct {
	// rpc is one announcement as GossipSub sends it: a length-prefixed
	// RPC carrying the signed message, in one yamux frame, in one Noise
	// message.
	rpc int
	// rpcMega is the same for a mega's announcement, which carries its
	// certificate.
	rpcMega int
	// msgID is the GossipSub message ID of an announcement
	// (DefaultMsgIdFn: from and seqno) and topic its topic, for IHAVEs.
	msgID string
	// streamIn and streamOut are a view stream's framing as the client
	// receives and sends it, its request and response excepted
	// (wireOverhead).
	streamIn, streamOut int
}

// Framing, from the specs (not measured):
//   - yamux (hashicorp/yamux spec.md): a 12-byte header per frame;
//   - Noise (libp2p noise spec): a 2-byte length and a 16-byte
//     Poly1305 tag per message; one frame per message is assumed;
//   - multistream-select 1.0 (libp2p specs, connections/): the opener
//     sends its header and the protocol ID, each uvarint-length-prefixed
//     and newline-terminated, and the listener echoes both.
//
// A view stream is, each way, a SYN (ACK), the negotiation, the message,
// and a FIN: four frames. TCP/IP and QUIC packet headers, yamux window
// updates and GossipSub's batching of several messages in one RPC are not
// counted.
const (
	yamuxHeader     = 12
	noiseOverhead   = 2 + 16
	frameOverhead   = yamuxHeader + noiseOverhead
	streamFrames    = 4
	multistreamName = "/multistream/1.0.0"
)

// newWire sizes the messages from their encodings: the GossipSub RPC of a
// regular supernode's announcement on interval base, and the view
// stream's framing.
func newWire(base time.Duration) (wire, error) {
	op, err := newSigner(0xd1, -1, nil)
	if err != nil {
		return wire{}, err
	}
	var w wire
	for i, operator := range []crypto.PrivKey{nil, op.key} {
		k, err := newSigner(0xd1, i, operator)
		if err != nil {
			return wire{}, err
		}
		m, err := k.message(epoch(), base)
		if err != nil {
			return wire{}, err
		}
		rpc := framed(proto.Size(&pubsubpb.RPC{Publish: []*pubsubpb.Message{m}})) + frameOverhead
		if operator == nil {
			w.rpc, w.msgID = rpc, string(m.From)+string(m.Seqno)
		} else {
			w.rpcMega = rpc
		}
	}
	w.streamIn = streamFrames*frameOverhead + msLen(multistreamName) + msLen(protocol.ViewID)
	w.streamOut = w.streamIn
	return w, nil
}

// meanRPC is the mean size of an announcement's RPC in a tier of s
// announcers of which megas are megas (whose carry a certificate).
func (w wire) meanRPC(s, megas int) float64 {
	m := min(megas, s)
	return (float64(w.rpc)*float64(s-m) + float64(w.rpcMega)*float64(m)) / float64(s)
}

// msLen is one multistream-select line: uvarint length, name, newline.
func msLen(name string) int {
	return protowire.SizeVarint(uint64(len(name)+1)) + len(name) + 1
}

// framed is a message of n bytes behind its uvarint length prefix (how
// GossipSub and protocol/ frame their messages).
func framed(n int) int { return protowire.SizeVarint(uint64(n)) + n }

// signer is one simulated announcer with a real Ed25519 key.
type signer struct {
	key  crypto.PrivKey
	id   peer.ID
	ip   [4]byte
	cert []byte // a mega's operator certificate, else nil
}

// newSigner makes announcer i's key from seed (deterministically), its
// address in a /24 of its own, and, with operator set, a mega certificate
// signed by operator.
func newSigner(seed uint64, i int, operator crypto.PrivKey) (signer, error) {
	var cs [32]byte
	binary.LittleEndian.PutUint64(cs[:], seed)
	binary.LittleEndian.PutUint64(cs[8:], uint64(i))
	key, _, err := crypto.GenerateEd25519Key(rand.NewChaCha8(cs))
	if err != nil {
		return signer{}, err
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return signer{}, err
	}
	s := signer{key: key, id: id, ip: [4]byte{byte(20 + i>>16), byte(i >> 8), byte(i), 1}}
	if operator != nil {
		c := protocol.MegaCert{Subject: id, Capacity: 10000, NotBefore: epoch().Add(-24 * time.Hour),
			NotAfter: epoch().Add(365 * 24 * time.Hour), Serial: uint64(i + 1)}
		if s.cert, err = protocol.SealMegaCert(c, operator); err != nil {
			return signer{}, err
		}
	}
	return s, nil
}

// announcement is what the daemon's announcer (supernode.Announcer.Next)
// would announce at now: two addresses (TCP and QUIC on one IP), capacity
// 1,000 and load 100 (a mega: 10,000), seq the Unix nanoseconds.
func (s signer) announcement(now time.Time, iv time.Duration) protocol.Announcement {
	ip := fmt.Sprintf("%d.%d.%d.%d", s.ip[0], s.ip[1], s.ip[2], s.ip[3])
	a := protocol.Announcement{
		ID:       s.id,
		Addrs:    []ma.Multiaddr{ma.StringCast("/ip4/" + ip + "/tcp/4001"), ma.StringCast("/ip4/" + ip + "/udp/4001/quic-v1")},
		Role:     protocol.RoleSupernode,
		Capacity: 1000, Load: 100,
		Version:  protocol.Version,
		Seq:      uint64(now.UnixNano()),
		Interval: iv,
		Issued:   now,
	}
	if s.cert != nil {
		a.Role, a.Capacity, a.MegaCert = protocol.RoleMega, 10000, s.cert
	}
	return a
}

// message is s's announcement at now, signed as go-libp2p-pubsub signs
// a message it publishes (sign.go, signMessage): pb.Message{From, Data,
// Seqno, Topic} marshalled, prefixed with "libp2p-pubsub:", signed with
// the Ed25519 key (whose ID inlines it, so no Key field). The seqno is
// GossipSub's: 8 bytes big-endian, a counter started at the Unix
// nanoseconds.
func (s signer) message(now time.Time, iv time.Duration) (*pubsubpb.Message, error) {
	a := s.announcement(now, iv)
	data, err := a.Marshal()
	if err != nil {
		return nil, err
	}
	m := &pubsubpb.Message{From: []byte(s.id), Data: data, Seqno: binary.BigEndian.AppendUint64(nil, a.Seq),
		Topic: proto.String(protocol.DirectoryTopic)}
	unsigned, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	if m.Signature, err = s.key.Sign(append([]byte("libp2p-pubsub:"), unsigned...)); err != nil {
		return nil, err
	}
	return m, nil
}

// ihaveBps is the IHAVE gossip a supernode with nonMesh topic peers
// outside its mesh receives a second, when the tier announces rate a
// second: computed, not simulated, from go-libp2p-pubsub v0.19's
// emitGossip with the daemon's parameters (the defaults for Dlazy,
// GossipFactor, HistoryGossip and MaxIHaveLength): every heartbeat a
// supernode sends one IHAVE to max(Dlazy, GossipFactor × nonMesh) of
// those peers (all, if fewer), listing the IDs of the messages of its
// last HistoryGossip heartbeats (at most MaxIHaveLength); by symmetry it
// receives as many as it sends. Peers answer with IWANT only for messages
// they lack, and the flood has delivered every one: no IWANT is counted.
func ihaveBps(nonMesh, rate float64, hb time.Duration, w wire) float64 {
	if nonMesh <= 0 {
		return 0
	}
	gp := pubsub.DefaultGossipSubParams()
	targets := min(nonMesh, max(float64(gp.Dlazy), gp.GossipFactor*nonMesh))
	ids := min(int(rate*float64(gp.HistoryGossip)*hb.Seconds()+0.5), gp.MaxIHaveLength)
	ihave := &pubsubpb.ControlIHave{TopicID: proto.String(protocol.DirectoryTopic), MessageIDs: make([]string, ids)}
	for i := range ihave.MessageIDs {
		ihave.MessageIDs[i] = w.msgID
	}
	size := framed(proto.Size(&pubsubpb.RPC{Control: &pubsubpb.ControlMessage{Ihave: []*pubsubpb.ControlIHave{ihave}}})) + frameOverhead
	return targets * float64(size) / hb.Seconds()
}

// meanDegree is the mean number of mesh peers in g.
func meanDegree(g [][]int32) float64 {
	n := 0
	for _, ps := range g {
		n += len(ps)
	}
	return float64(n) / float64(len(g))
}

// Markdown renders rows as a Markdown table.
func Markdown(rows []Row) string {
	var b strings.Builder
	b.WriteString("| supernodes | design | announce interval | per ordinary node B/s | checks/s | CPU | per supernode B/s | announcements | IHAVE | view requests | checks/s | CPU | copies/announcement |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %d | %s | %v | %.0f | %.2f | %.3f%% | %.0f | %.0f | %.0f | %.0f | %.1f | %.2f%% | %.1f |\n",
			r.Supernodes, r.Design, r.Interval, r.OrdinaryBps, r.OrdinaryChecks, 100*r.OrdinaryCPU,
			r.SupernodeBps, r.GossipBps, r.IHaveBps, r.ViewBps, r.SupernodeChecks, 100*r.SupernodeCPU, r.Copies)
	}
	return b.String()
}

// RefreshMarkdown renders the view rows' per-refresh figures: what
// one refresh and its cross-check cost an ordinary node.
func RefreshMarkdown(rows []Row) string {
	var b strings.Builder
	b.WriteString("| supernodes | refresh interval | bytes received per refresh | checks per refresh | ordinary node sends B/s |\n")
	b.WriteString("|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		if r.Design == DesignView {
			fmt.Fprintf(&b, "| %d | %v | %.0f | %.2f | %.0f |\n", r.Supernodes, r.Interval, r.RefreshBytes, r.RefreshChecks, r.OrdinarySentBps)
		}
	}
	return b.String()
}

// todayMesh is the GossipSub mesh of today's supernode tier, where every
// supernode is connected to every other (node/dirdriver meshLoop): each grafts Degree
// random others (the heartbeat grafts up to D while the mesh is below
// Dlo) and accepts every graft (Dhi is at least 4,096), so its mesh is
// the Degree it chose and those that chose it, about 2×Degree. Leaves
// (ordinary nodes) are in their supernode's mesh too but forward nothing.
func todayMesh(s, degree int, rng *rand.Rand) [][]int32 {
	g := make([][]int32, s)
	chosen := make([]int32, 0, degree)
	for v := range s {
		chosen = chosen[:0]
		for len(chosen) < min(degree, s-1) {
			u := int32(rng.IntN(s - 1))
			if u >= int32(v) {
				u++ // skip v itself
			}
			if !slices.Contains(chosen, u) {
				chosen = append(chosen, u)
				link(g, int32(v), u)
			}
		}
	}
	return g
}

// boundedMesh is the view design's supernode mesh at any size: a random
// Degree-regular graph, the union of Degree/2 random cycles through every
// supernode (fewer links where two cycles share one). A supernode is
// connected to its mesh peers only, so its flood-publish reaches them.
func boundedMesh(s, degree int, rng *rand.Rand) [][]int32 {
	g := make([][]int32, s)
	for range degree / 2 {
		perm := rng.Perm(s)
		for i, v := range perm {
			link(g, int32(v), int32(perm[(i+1)%s]))
		}
	}
	return g
}

// link adds the undirected link u-v to g unless it is there or a loop.
func link(g [][]int32, u, v int32) {
	if u == v {
		return
	}
	for _, w := range g[u] {
		if w == v {
			return
		}
	}
	g[u] = append(g[u], v)
	g[v] = append(g[v], u)
}

// meanCopies is how many copies of one announcement a supernode other
// than its origin receives on average, over p.Origins random origins'
// announcements gossiped on mesh g (flood).
func meanCopies(g [][]int32, connectedToAll bool, p Params, rng *rand.Rand) float64 {
	seen := make([]bool, len(g))
	var total float64
	for range p.Origins {
		clear(seen)
		o := int32(rng.IntN(len(g)))
		total += float64(flood(g, o, connectedToAll, seen, p)) / float64(len(g)-1)
	}
	return total / float64(p.Origins)
}

// flood gossips one announcement from origin o over mesh g in virtual
// time, as go-libp2p-pubsub v0.19's GossipSubRouter does (rpcs): the
// origin flood-publishes to every topic peer it is connected to (all
// supernodes when connectedToAll, else its mesh); a supernode forwards
// the first copy it receives to its mesh peers except the one it came
// from and the origin, and drops later copies in its seen-cache. It
// returns the copies the supernodes other than o received. A link's
// latency is fixed (linkLatency); the origin's sends are not serialised
// on its uplink, and gossip (IHAVE/IWANT) is not modelled: with every
// copy delivered at once it carries no message, only message IDs.
func flood(g [][]int32, o int32, connectedToAll bool, seen []bool, p Params) int {
	var q vtime.Queue[event]
	seen[o] = true
	if connectedToAll {
		for v := range int32(len(g)) {
			if v != o {
				schedule(&q, event{at: linkLatency(o, v, p), a: v, b: o})
			}
		}
	} else {
		for _, v := range g[o] {
			schedule(&q, event{at: linkLatency(o, v, p), a: v, b: o})
		}
	}
	copies := 0
	for q.Len() > 0 {
		_, e := q.Pop()
		copies++
		if seen[e.a] {
			continue
		}
		seen[e.a] = true
		for _, w := range g[e.a] {
			if w != e.b && w != o {
				schedule(&q, event{at: e.at + linkLatency(e.a, w, p), a: w, b: e.a})
			}
		}
	}
	return copies
}

// linkLatency is the one-way latency of link u-v in nanoseconds, uniform
// in [LatencyMin, LatencyMax], the same both ways and drawn from the seed
// (not stored: 100,000 supernodes have millions of links).
func linkLatency(u, v int32, p Params) int64 {
	lo, hi := min(u, v), max(u, v)
	x := synthid.Mix(p.Seed ^ uint64(lo)<<32 ^ uint64(hi))
	span := uint64(p.LatencyMax-p.LatencyMin) + 1
	return int64(p.LatencyMin) + int64(x%span)
}

// viewDir is the directory every supernode serves views from, built from
// real signed announcements. The model's directory does not change: an
// announcement only bumps cur (its count), and an entry's signed message
// is sent to a client whose count for it is older (have).
type viewDir struct {
	snap *directory.Snapshot
	ring *ring.Ring
	idx  map[peer.ID]int32
	mega []bool
	cur  []uint32 // announcements each has made so far
}

// newViewDir builds the directory of n announcers on interval iv, the
// first p.Megas of them megas with certificates of one operator, and its
// ring (cluster.Members under the default policy, ring.New), at epoch.
func newViewDir(n int, iv time.Duration, p Params) (*viewDir, error) {
	op, err := newSigner(p.Seed^0x6f70, -1, nil)
	if err != nil {
		return nil, err
	}
	trusted := []crypto.PubKey{op.key.GetPublic()}
	verify := func(a protocol.Announcement, now time.Time) (protocol.MegaCert, error) {
		if a.Role != protocol.RoleMega {
			return protocol.MegaCert{}, nil
		}
		return protocol.VerifyMegaCert(a.MegaCert, trusted, a.ID, now, func(uint64) bool { return false })
	}
	dir := directory.New(directory.WithMegaVerifier(verify), directory.WithMaxEntries(n))
	dir.SetLimits(directory.DefaultLimits(iv))
	for i := range n {
		var operator crypto.PrivKey
		if i < p.Megas {
			operator = op.key
		}
		if err := addSigned(dir, p.Seed, i, operator, iv); err != nil {
			return nil, err
		}
	}
	d := &viewDir{snap: dir.Snapshot(), idx: make(map[peer.ID]int32, n), mega: make([]bool, n), cur: make([]uint32, n)}
	for i, e := range d.snap.Entries {
		d.idx[e.ID] = int32(i)
		d.mega[i] = e.Role == protocol.RoleMega
	}
	ms := cluster.Members(d.snap, epoch(), cluster.DefaultPolicy(iv, false))
	if d.ring, err = ring.New(ms); err != nil {
		return nil, fmt.Errorf("dircost: ring of %d: %w", len(ms), err)
	}
	return d, nil
}

// addSigned gives dir announcer i's signed announcement at epoch.
func addSigned(dir *directory.Directory, seed uint64, i int, operator crypto.PrivKey, iv time.Duration) error {
	s, err := newSigner(seed, i, operator)
	if err != nil {
		return err
	}
	m, err := s.message(epoch(), iv)
	if err != nil {
		return err
	}
	signed, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	if _, err := dir.Receive(s.id, m.Data, signed, epoch()); err != nil {
		return fmt.Errorf("dircost: announcer %d: %w", i, err)
	}
	return nil
}

// viewClient is one ordinary node of the view design: its key and the
// entries it holds, each with the count of the announcement it holds.
type viewClient struct {
	key  []byte
	held []heldEntry
}

type heldEntry struct {
	idx int32
	n   uint32
}

// viewCost is what the view clients measured, per client.
type viewCost struct {
	recvBps, sentBps, checks    float64
	refreshBytes, refreshChecks float64
}

// viewClients runs p.Clients ordinary nodes against a directory of n
// announcers on interval iv: every announcer announces on the daemon's
// schedule; every client refreshes its view on the same schedule (once
// an interval, the entries' own) from a supernode (view.Build) and
// CrossCheckDelay later cross-checks it with another (neighbours only,
// with its have list). Every supernode holds the same directory (gossip
// delay is not modelled), so which supernodes serve does not matter.
// Measured over p.Intervals intervals after two of warm-up.
func viewClients(n int, iv time.Duration, p Params, w wire, rng *rand.Rand) (viewCost, error) {
	d, err := newViewDir(n, iv, p)
	if err != nil {
		return viewCost{}, err
	}
	cs := make([]viewClient, p.Clients)
	var q vtime.Queue[event]
	for i := range n {
		schedule(&q, event{at: 0, k: evAnnounce, a: int32(i)})
	}
	for i := range cs {
		cs[i].key = []byte(synthid.ID(p.Seed, synthid.Client, uint64(i)))
		schedule(&q, event{at: int64(nextAnnounce(iv, true, rng)), k: evViewRefresh, a: int32(i)})
	}
	from, to := 2*int64(iv), int64(2+p.Intervals)*int64(iv)
	var recv, sent, checks, refreshes float64
	for q.Len() > 0 {
		_, e := q.Pop()
		if e.at >= to {
			break
		}
		switch e.k {
		case evAnnounce:
			d.cur[e.a]++
			e.at += int64(nextAnnounce(iv, e.gen == 0, rng))
			e.gen = 1
			schedule(&q, e)
			continue
		case evViewRefresh:
			schedule(&q, event{at: e.at + int64(p.CrossCheckDelay), k: evViewCheck, a: e.a})
			schedule(&q, event{at: e.at + int64(nextAnnounce(iv, false, rng)), k: evViewRefresh, a: e.a})
		}
		in, out, c := d.exchange(&cs[e.a], e.k == evViewCheck, w, rng)
		if e.at >= from {
			recv, sent, checks = recv+float64(in), sent+float64(out), checks+float64(c)
			if e.k == evViewRefresh {
				refreshes++
			}
		}
	}
	per := float64(p.Clients) * time.Duration(to-from).Seconds()
	return viewCost{recvBps: recv / per, sentBps: sent / per, checks: checks / per,
		refreshBytes: recv / refreshes, refreshChecks: checks / refreshes}, nil
}

// exchange is one view stream of client c: its request (a cross-check
// asks for neighbours only), the response view.Build gives, and what the
// client does with it: it checks every entry that carries a signed
// message (a mega's twice: message and certificate), and after a refresh
// holds exactly the response's entries. It returns the bytes the client
// received and sent, framing included, and its checks.
func (d *viewDir) exchange(c *viewClient, check bool, w wire, rng *rand.Rand) (in, out, checks int) {
	req := &pb.ViewRequest{Keys: [][]byte{c.key}, NeighboursOnly: check}
	have := make(map[peer.ID]uint64, len(c.held))
	for _, h := range c.held {
		e := d.snap.Entries[h.idx]
		req.Have = append(req.Have, &pb.ViewHave{PeerId: []byte(e.ID), Seq: e.Seq})
		// Build leaves the signed message out when have is at least the
		// entry's seq: the client's is older when it has announced since.
		have[e.ID] = e.Seq
		if h.n != d.cur[h.idx] {
			have[e.ID] = e.Seq - 1
		}
	}
	resp := view.Build(d.ring, d.snap, req.Keys, have, check, rng)
	held := make([]heldEntry, 0, len(resp.Entries))
	for _, ve := range resp.Entries {
		i := d.idx[peer.ID(ve.PeerId)]
		if ve.Signed != nil {
			checks++
			if d.mega[i] {
				checks++
			}
		}
		held = append(held, heldEntry{idx: i, n: d.cur[i]})
	}
	if !check {
		c.held = held
	} else {
		c.refresh(held)
	}
	in = framed(proto.Size(resp)) + w.streamIn
	out = framed(proto.Size(req)) + w.streamOut
	return in, out, checks
}

// refresh updates the counts of the entries c holds that a cross-check
// brought.
func (c *viewClient) refresh(got []heldEntry) {
	for _, g := range got {
		for k := range c.held {
			if c.held[k].idx == g.idx {
				c.held[k].n = g.n
			}
		}
	}
}
