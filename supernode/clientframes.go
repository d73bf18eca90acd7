package supernode

import (
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// Frames for clients are bounded by what a client accepts: a client reads
// its session under protocol.MaxSessionFrame and resets the session on a
// larger frame. Relay frames are bounded by the larger
// protocol.MaxRelayFrame, so a frame relayed from another supernode (a
// Deliver, a GroupMessage, an Ack, a publish Result, a members list) may not
// fit. Every frame for a client is measured here before it is queued; one
// that does not fit is dropped and counted, never forwarded: forwarded, one
// 200 KiB group message reset the session of every member it reached.

// fitsSession reports whether f, encoded, is within the limit a client
// reads its session under.
func fitsSession(f *pb.SessionFrame) bool { return proto.Size(f) <= protocol.MaxSessionFrame }

// toClient queues f for client unless it is too large for the client's
// session, which it counts on oversize and reports as fits = false. sent
// is false too when the client is not attached here or its outbox is full.
func (r *Router) toClient(client peer.ID, f *pb.SessionFrame, oversize *atomic.Uint64) (sent, fits bool) {
	if !fitsSession(f) {
		oversize.Add(1)
		r.log.Debug("frame for client too large", "peer", client.ShortString(), "bytes", proto.Size(f))
		return false, false
	}
	return r.adm.Send(client, encodeSession(f)), true
}
