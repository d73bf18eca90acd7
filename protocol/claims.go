package protocol

import (
	"fmt"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"

	"github.com/overlayd/overlayd/protocol/pb"
)

// Claims are the records a client originates about itself that supernodes
// carry to other supernodes: where it is attached (presence) and which
// groups it belongs to (membership). Each is a libp2p signed envelope with
// a domain of its own, signed by the client, and verified by the supernode
// that acts on it (the client's home cluster, the group's home), so a
// supernode relaying a claim can drop it but never forge or alter it: it
// cannot move a client's location or membership to itself.
const (
	PresenceDomain   = "overlayd-presence"
	MembershipDomain = "overlayd-membership"
	// MaxClaim bounds a signed claim: a few fields and the envelope.
	MaxClaim = 1024
)

// openClaim checks b's size and signature and that its signer is want.
func openClaim(b []byte, rec record.Record, want peer.ID) error {
	if len(b) == 0 || len(b) > MaxClaim {
		return fmt.Errorf("%w: %d bytes, want 1 to %d", ErrClaim, len(b), MaxClaim)
	}
	env, err := record.ConsumeTypedEnvelope(b, rec)
	if err != nil {
		return fmt.Errorf("%w: signature: %w", ErrClaim, err)
	}
	signer, err := peer.IDFromPublicKey(env.PublicKey)
	if err != nil || signer != want {
		return fmt.Errorf("%w: signed by %s, not %s", ErrClaim, signer, want)
	}
	return nil
}

// SignPresence is a client's claim that it attaches at supernode in
// session seq; it goes in AttachRequest.presence.
func SignPresence(client crypto.PrivKey, supernode peer.ID, seq uint64) ([]byte, error) {
	return seal(presenceKind.of(&pb.PresenceClaim{Supernode: []byte(supernode), SessionSeq: seq}), client)
}

// VerifyPresence checks that b is client's claim to be attached at
// supernode in session seq.
func VerifyPresence(b []byte, client, supernode peer.ID, seq uint64) error {
	var rec pb.PresenceClaim
	if err := openClaim(b, presenceKind.of(&rec), client); err != nil {
		return err
	}
	if peer.ID(rec.GetSupernode()) != supernode || rec.GetSessionSeq() != seq {
		return fmt.Errorf("%w: presence signed for %s session %d, not %s session %d",
			ErrClaim, peer.ID(rec.GetSupernode()), rec.GetSessionSeq(), supernode, seq)
	}
	return nil
}

// Membership is a verified membership claim.
type Membership struct {
	Group     string
	Supernode peer.ID
	Join      bool
	// Seq is the member's clock in nanoseconds when it signed: newer
	// claims win.
	Seq uint64
}

// SignMembership is a client's claim to join (or leave) group at
// supernode, signed at seq (its clock in nanoseconds); it goes in
// GroupOp.claim.
func SignMembership(member crypto.PrivKey, m Membership) ([]byte, error) {
	return seal(membershipKind.of(&pb.MembershipClaim{Group: m.Group, Supernode: []byte(m.Supernode), Join: m.Join, Seq: m.Seq}), member)
}

// VerifyMembership checks that b is member's claim about group and returns
// it.
func VerifyMembership(b []byte, member peer.ID, group string) (Membership, error) {
	var rec pb.MembershipClaim
	if err := openClaim(b, membershipKind.of(&rec), member); err != nil {
		return Membership{}, err
	}
	if rec.GetGroup() != group {
		return Membership{}, fmt.Errorf("%w: membership signed for group %q, not %q", ErrClaim, rec.GetGroup(), group)
	}
	return Membership{Group: rec.GetGroup(), Supernode: peer.ID(rec.GetSupernode()), Join: rec.GetJoin(), Seq: rec.GetSeq()}, nil
}
