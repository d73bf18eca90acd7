package protocol

import (
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/protocol/pb"
)

// PeerAddrsPB encodes a peer and its addresses.
func PeerAddrsPB(ai peer.AddrInfo) *pb.PeerAddrs {
	m := &pb.PeerAddrs{PeerId: []byte(ai.ID)}
	for _, a := range ai.Addrs {
		m.Addrs = append(m.Addrs, a.Bytes())
	}
	return m
}

// PeerAddrsFromPB decodes alternatives, skipping (not failing on) entries
// that do not decode: an alternative is advice, and one bad entry should not
// cost the client the others. At most MaxAlternatives are returned.
func PeerAddrsFromPB(ms []*pb.PeerAddrs) []peer.AddrInfo {
	var out []peer.AddrInfo
	for _, m := range ms {
		if len(out) == MaxAlternatives {
			break
		}
		id, err := peer.IDFromBytes(m.GetPeerId())
		if err != nil {
			continue
		}
		ai := peer.AddrInfo{ID: id}
		for _, raw := range m.GetAddrs() {
			if a, err := ma.NewMultiaddrBytes(raw); err == nil {
				ai.Addrs = append(ai.Addrs, a)
			}
		}
		out = append(out, ai)
	}
	return out
}
