package supernode

import (
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/overlay/view"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// ViewService is the resource-manager service of the view protocol.
const ViewService = "overlayd.view"

// Bounds of the view server.
const (
	// MaxViewRequest bounds a ViewRequest: MaxViewKeys keys and
	// MaxViewEntries haves, with room for their encoding.
	MaxViewRequest = protocol.MaxViewKeys*(protocol.MaxViewKey+8) + protocol.MaxViewEntries*64 + 64
	// viewConcurrency is how many view requests a supernode serves at
	// once; more are reset unread (a request costs a pass over the
	// directory, and the client asks again a little later).
	viewConcurrency = 8
	viewTimeout     = 5 * time.Second
)

// ViewServer serves protocol.ViewID: partial views of this supernode's
// directory (overlay/view) to ordinary nodes, which do not hear the
// announcement topic.
type ViewServer struct {
	ring    func() *ring.Ring
	snap    func() *directory.Snapshot
	serving func() bool
	now     func() time.Time
	log     *slog.Logger

	slots chan struct{}
	mu    sync.Mutex // rng, ix, built
	rng   *rand.Rand
	ix    *view.Index
	built time.Time
}

// viewIndexAge is how stale the index views are built from may be: the
// snapshot changes with every announcement (175 a second at 100,000
// supernodes). Only the choice of spares is that old: entries are looked
// up in the current snapshot, or an index older than the announce
// interval would serve entries that expire at the client.
const viewIndexAge = time.Second

// NewViewServer returns a view server over the node's ring and directory.
// serving says whether the node plays the supernode role now (an auto node
// that does not resets view streams).
func NewViewServer(rings func() *ring.Ring, snap func() *directory.Snapshot, serving func() bool,
	now func() time.Time, rng *rand.Rand, log *slog.Logger) *ViewServer {
	return &ViewServer{ring: rings, snap: snap, serving: serving, now: now, rng: rng, log: log,
		slots: make(chan struct{}, viewConcurrency)}
}

// Handle serves one view stream: a ViewRequest, answered by one
// ViewResponse. A stream beyond viewConcurrency, from a node that does not
// serve, or with a bad request is reset.
func (v *ViewServer) Handle(s network.Stream) {
	if !v.serving() {
		s.Reset()
		return
	}
	select {
	case v.slots <- struct{}{}:
		defer func() { <-v.slots }()
	default:
		s.Reset()
		return
	}
	if err := s.Scope().SetService(ViewService); err != nil {
		s.Reset()
		return
	}
	if err := s.Scope().ReserveMemory(MaxViewRequest+protocol.MaxViewFrame, network.ReservationPriorityAlways); err != nil {
		s.Reset()
		return
	}
	defer s.Scope().ReleaseMemory(MaxViewRequest + protocol.MaxViewFrame)
	_ = s.SetDeadline(v.now().Add(viewTimeout))
	var req pb.ViewRequest
	if err := protocol.NewFrameReader(s, MaxViewRequest).Read(&req); err != nil {
		s.Reset()
		return
	}
	keys, have, err := checkViewRequest(&req)
	if err != nil {
		v.log.Debug("view request refused", "from", s.Conn().RemotePeer().ShortString(), "err", err)
		s.Reset()
		return
	}
	v.mu.Lock()
	resp := v.index().Build(v.snap(), keys, have, req.GetNeighboursOnly(), v.rng)
	v.mu.Unlock()
	if err := protocol.WriteFrame(s, resp); err != nil {
		s.Reset()
		return
	}
	_ = s.Close()
}

// index returns the index of the current ring and snapshot: rebuilt when
// the ring changed (homes must follow it at once), or when the snapshot
// changed and the index is viewIndexAge old. v.mu is held.
func (v *ViewServer) index() *view.Index {
	r, s, now := v.ring(), v.snap(), v.now()
	if v.ix == nil || !v.ix.Of(r, s) && (v.ix.Ring() != r || now.Sub(v.built) >= viewIndexAge) {
		v.ix, v.built = view.NewIndex(r, s), now
	}
	return v.ix
}

// checkViewRequest returns a request's keys and haves, or why it is
// refused.
func checkViewRequest(req *pb.ViewRequest) ([][]byte, map[peer.ID]uint64, error) {
	keys := req.GetKeys()
	if len(keys) == 0 || len(keys) > protocol.MaxViewKeys {
		return nil, nil, protocol.Reject(protocol.ReasonInvalid, "%d keys, want 1 to %d", len(keys), protocol.MaxViewKeys)
	}
	for i, k := range keys {
		if len(k) == 0 || len(k) > protocol.MaxViewKey {
			return nil, nil, protocol.Reject(protocol.ReasonInvalid, "key %d of %d bytes, want 1 to %d", i, len(k), protocol.MaxViewKey)
		}
	}
	if len(req.GetHave()) > protocol.MaxViewEntries {
		return nil, nil, protocol.Reject(protocol.ReasonInvalid, "%d haves, at most %d", len(req.GetHave()), protocol.MaxViewEntries)
	}
	have := make(map[peer.ID]uint64, len(req.GetHave()))
	for _, h := range req.GetHave() {
		p, err := peer.IDFromBytes(h.GetPeerId())
		if err != nil {
			return nil, nil, protocol.Reject(protocol.ReasonInvalid, "have: %v", err)
		}
		have[p] = h.GetSeq()
	}
	return keys, have, nil
}
