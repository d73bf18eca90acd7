package protocol

import (
	"bytes"
	"crypto/sha256"
	"fmt"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"

	"github.com/overlayd/overlayd/protocol/pb"
)

// Group messages carry two signatures: the publisher's over the group, the
// message ID and the payload (a PublishClaim, domain PublishDomain), and
// the group home's over the number it gave the message (a GroupStamp,
// domain StampDomain), which covers the publisher's envelope by its
// SHA-256. The home numbers no publish without the publisher's signature;
// a supernode fans out no group message not stamped by the group's home;
// a member believes neither signature on a supernode's word. So a
// supernode can drop or delay a group message, but cannot publish in a
// client's name, alter a message, or number one as the home. Group
// payloads are not encrypted: the home and the supernodes that fan a
// message out can read it.
const (
	PublishDomain = "overlayd-group-publish"
	StampDomain   = "overlayd-group-message"
	// MaxSignedPublish bounds GroupPublish.signed and
	// GroupMessage.publish: a MaxPayload payload in its envelope.
	MaxSignedPublish = MaxPayload + 512
	// MaxStamp bounds GroupMessage.stamp.
	MaxStamp = 512
)

// SignPublish is a publisher's signature on a group message; it goes in
// GroupPublish.signed.
func SignPublish(publisher crypto.PrivKey, group string, id, payload []byte) ([]byte, error) {
	return seal(publishKind.of(&pb.PublishClaim{Group: group, Id: id, Payload: payload}), publisher)
}

// VerifyPublish checks that signed is publisher's message id to group and
// returns its payload.
func VerifyPublish(signed []byte, publisher peer.ID, group string, id []byte) ([]byte, error) {
	if len(signed) == 0 || len(signed) > MaxSignedPublish {
		return nil, fmt.Errorf("%w: publish of %d bytes, want 1 to %d", ErrGroupSignature, len(signed), MaxSignedPublish)
	}
	var rec pb.PublishClaim
	env, err := record.ConsumeTypedEnvelope(signed, publishKind.of(&rec))
	if err != nil {
		return nil, fmt.Errorf("%w: publish: %w", ErrGroupSignature, err)
	}
	signer, err := peer.IDFromPublicKey(env.PublicKey)
	if err != nil || signer != publisher {
		return nil, fmt.Errorf("%w: publish signed by %s, not the publisher %s", ErrGroupSignature, signer, publisher)
	}
	if rec.GetGroup() != group || !bytes.Equal(rec.GetId(), id) {
		return nil, fmt.Errorf("%w: publish signed for another group or message", ErrGroupSignature)
	}
	return rec.GetPayload(), nil
}

// Stamp is the group home's signature on message (group, epoch, seq) whose
// publisher signed publish; it goes in GroupMessage.stamp.
func Stamp(home crypto.PrivKey, group string, epoch, seq uint64, publish []byte) ([]byte, error) {
	d := sha256.Sum256(publish)
	return seal(stampKind.of(&pb.GroupStamp{Group: group, Epoch: epoch, Seq: seq, PublishDigest: d[:]}), home)
}

// VerifyStamp checks that gm is stamped by home for its group, epoch, seq
// and publisher's envelope.
func VerifyStamp(gm *pb.GroupMessage, home peer.ID) error {
	_, err := verifyStamp(gm, func(p peer.ID) bool { return p == home })
	return err
}

// verifyStamp checks gm's stamp and that its signer is one isHome accepts,
// and returns the signer.
func verifyStamp(gm *pb.GroupMessage, isHome func(peer.ID) bool) (peer.ID, error) {
	b := gm.GetStamp()
	if len(b) == 0 || len(b) > MaxStamp {
		return "", fmt.Errorf("%w: stamp of %d bytes, want 1 to %d", ErrGroupSignature, len(b), MaxStamp)
	}
	var rec pb.GroupStamp
	env, err := record.ConsumeTypedEnvelope(b, stampKind.of(&rec))
	if err != nil {
		return "", fmt.Errorf("%w: stamp: %w", ErrGroupSignature, err)
	}
	signer, err := peer.IDFromPublicKey(env.PublicKey)
	if err != nil || !isHome(signer) {
		return "", fmt.Errorf("%w: stamped by %s, not the group's home", ErrGroupSignature, signer)
	}
	d := sha256.Sum256(gm.GetPublish())
	if rec.GetGroup() != gm.GetGroup() || rec.GetEpoch() != gm.GetEpoch() || rec.GetSeq() != gm.GetSeq() ||
		!bytes.Equal(rec.GetPublishDigest(), d[:]) {
		return "", fmt.Errorf("%w: stamp for another message", ErrGroupSignature)
	}
	return signer, nil
}

// OpenGroupMessage checks both signatures of gm — a stamp by a peer
// isHome accepts as the group's home, and the publisher's (gm.from) claim
// — and returns the payload.
func OpenGroupMessage(gm *pb.GroupMessage, isHome func(peer.ID) bool) ([]byte, error) {
	if _, err := verifyStamp(gm, isHome); err != nil {
		return nil, err
	}
	from, err := peer.IDFromBytes(gm.GetFrom())
	if err != nil {
		return nil, fmt.Errorf("%w: publisher: %w", ErrGroupSignature, err)
	}
	return VerifyPublish(gm.GetPublish(), from, gm.GetGroup(), gm.GetId())
}
