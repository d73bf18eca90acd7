package protocol

import (
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// ViewID is the partial-view protocol: a request/response stream from any
// peer to a serving supernode, ViewRequest then ViewResponse.
const ViewID = "/overlayd/view/1.0.0"

// View limits.
const (
	// MaxViewKeys bounds the keys of one ViewRequest: the client's own and
	// those of the groups it asks about in the same request.
	MaxViewKeys = 8
	// MaxViewKey bounds one key: a peer ID or a group name.
	MaxViewKey = MaxGroupName
	// MaxViewEntries bounds the entries of a ViewResponse and the haves of
	// a ViewRequest.
	MaxViewEntries = 64
	// MaxSignedAnnouncement bounds one view entry's signed message: an
	// announcement and GossipSub's envelope (from, seqno, topic,
	// signature, and a key for peers whose ID does not inline it).
	MaxSignedAnnouncement = MaxAnnouncementSize + 1024
	// MaxViewFrame bounds a ViewResponse (and, far above need, a
	// ViewRequest).
	MaxViewFrame = MaxViewEntries * (MaxSignedAnnouncement + 64)
)

// pubsubSignPrefix is what go-libp2p-pubsub prepends to the message it
// signs (pubsub.SignPrefix).
const pubsubSignPrefix = "libp2p-pubsub:"

// OpenSigned checks a directory message as GossipSub's StrictSign does
// when it receives one, and returns its signer and its data (an encoded
// Announcement, not yet decoded or checked): signed is a go-libp2p-pubsub
// pb.Message for DirectoryTopic whose signature, over the message without
// its signature and key, verifies under the public key of its From peer
// (inlined in the ID, or the message's key when the ID is a hash of it).
// Errors are *RejectError: oversize, undecodable, bad_signature.
//
// The signed bytes are the decoded message re-encoded without signature
// and key, exactly as GossipSub's own check computes them.
func OpenSigned(signed []byte) (peer.ID, []byte, error) {
	if len(signed) > MaxSignedAnnouncement {
		return "", nil, Reject(ReasonOversize, "signed announcement of %d bytes, limit %d", len(signed), MaxSignedAnnouncement)
	}
	var m pubsubpb.Message
	if err := proto.Unmarshal(signed, &m); err != nil {
		return "", nil, Reject(ReasonUndecodable, "signed announcement: %v", err)
	}
	if m.GetTopic() != DirectoryTopic {
		return "", nil, Reject(ReasonBadSignature, "signed for topic %q, not %q", m.GetTopic(), DirectoryTopic)
	}
	from, err := peer.IDFromBytes(m.GetFrom())
	if err != nil {
		return "", nil, Reject(ReasonBadSignature, "signer: %v", err)
	}
	pub, err := from.ExtractPublicKey()
	if err != nil {
		// A key too large to inline: the message must carry it, and it
		// must hash to the signer's ID.
		if pub, err = crypto.UnmarshalPublicKey(m.GetKey()); err != nil {
			return "", nil, Reject(ReasonBadSignature, "signer %s: no public key: %v", from.ShortString(), err)
		}
		if !from.MatchesPublicKey(pub) {
			return "", nil, Reject(ReasonBadSignature, "key does not match signer %s", from.ShortString())
		}
	}
	unsigned := proto.CloneOf(&m)
	unsigned.Signature, unsigned.Key = nil, nil
	b, err := proto.Marshal(unsigned)
	if err != nil {
		return "", nil, Reject(ReasonUndecodable, "signed announcement: %v", err)
	}
	ok, err := pub.Verify(append([]byte(pubsubSignPrefix), b...), m.GetSignature())
	if err != nil || !ok {
		return "", nil, Reject(ReasonBadSignature, "signature of %s does not verify", from.ShortString())
	}
	if len(m.GetData()) == 0 {
		return "", nil, Reject(ReasonInvalid, "signed announcement of %s carries no data", from.ShortString())
	}
	return from, m.GetData(), nil
}
