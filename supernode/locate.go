package supernode

import (
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// LocateService is the resource-manager service of the locate protocol.
const LocateService = "overlayd.locate"

// locateTimeout bounds serving one locate request; the router may ask up
// to cluster.Size home members in turn.
const locateTimeout = 8 * time.Second

// Locate returns the supernode client is attached to: this one when it is
// attached here, else as the presence records say (the lookup cache, this
// supernode's own records, then the client's home cluster, asked under the
// lookups semaphore). It blocks for at most one lookup round trip per home
// member.
func (r *Router) Locate(client peer.ID) (peer.ID, bool) {
	if r.adm.Has(client) {
		return r.self(), true
	}
	return r.locate(client, false)
}

// HandleLocate serves protocol.LocateID for clients attached here: where is
// peer X attached? The answer carries that supernode's addresses from
// RouterConfig.AddrsOf. Streams from peers that are not attached here are
// reset before anything is read. The node registers it while it serves (it
// goes with the circuit relay, which is what a located peer is reached
// through).
func (r *Router) HandleLocate(s network.Stream) {
	if err := s.Scope().SetService(LocateService); err != nil {
		s.Reset()
		return
	}
	remote := s.Conn().RemotePeer()
	if !r.adm.Has(remote) {
		r.log.Debug("locate refused: not attached here", "from", remote.ShortString())
		s.Reset()
		return
	}
	if err := s.Scope().ReserveMemory(2*protocol.MaxLocateFrame, network.ReservationPriorityAlways); err != nil {
		s.Reset()
		return
	}
	defer s.Scope().ReleaseMemory(2 * protocol.MaxLocateFrame)
	_ = s.SetDeadline(r.cfg.Now().Add(locateTimeout))
	var req pb.LookupRequest
	if err := protocol.NewFrameReader(s, protocol.MaxLocateFrame).Read(&req); err != nil {
		s.Reset()
		return
	}
	target, err := peer.IDFromBytes(req.GetClient())
	if err != nil {
		s.Reset()
		return
	}
	resp := &pb.LookupResponse{}
	if loc, ok := r.Locate(target); ok {
		resp.Found, resp.Location = true, []byte(loc)
		for _, a := range r.addrsOf(loc) {
			resp.LocationAddrs = append(resp.LocationAddrs, a.Bytes())
		}
	}
	if err := protocol.WriteFrame(s, resp); err != nil {
		s.Reset()
		return
	}
	_ = s.Close()
}

// addrsOf returns the addresses of supernode p: this one's own, or what
// RouterConfig.AddrsOf knows.
func (r *Router) addrsOf(p peer.ID) []ma.Multiaddr {
	if p == r.self() {
		return r.h.Addrs()
	}
	if r.cfg.AddrsOf != nil {
		return r.cfg.AddrsOf(p)
	}
	return nil
}
