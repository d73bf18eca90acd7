package supernode

import (
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode/group"
)

// GroupVerifier is the group core's Verifier: the protocol's signature
// checks, with peer IDs in their binary form.
type GroupVerifier struct{}

var _ group.Verifier = GroupVerifier{}

// VerifyPublish checks that the publisher from signed the publish.
func (GroupVerifier) VerifyPublish(signed []byte, from, g string, id []byte) error {
	p, err := peer.IDFromBytes([]byte(from))
	if err != nil {
		return err
	}
	_, err = protocol.VerifyPublish(signed, p, g, id)
	return err
}

// VerifyMembership checks a member's signed membership claim.
func (GroupVerifier) VerifyMembership(claim []byte, member, g string) (group.Claim, error) {
	m, err := peer.IDFromBytes([]byte(member))
	if err != nil {
		return group.Claim{}, err
	}
	mc, err := protocol.VerifyMembership(claim, m, g)
	if err != nil {
		return group.Claim{}, err
	}
	return group.Claim{Supernode: string(mc.Supernode), Join: mc.Join, Seq: mc.Seq}, nil
}

// VerifyStamp checks a group message's stamp by home.
func (GroupVerifier) VerifyStamp(gm *pb.GroupMessage, home string) error {
	return protocol.VerifyStamp(gm, peer.ID(home))
}

// OpenGroupMessage checks a group message's stamp and its publisher's
// signature.
func (GroupVerifier) OpenGroupMessage(gm *pb.GroupMessage, isHome func(string) bool) error {
	_, err := protocol.OpenGroupMessage(gm, func(p peer.ID) bool { return isHome(string(p)) })
	return err
}

// GroupSigner is the group core's Signer: stamps with the supernode's key.
type GroupSigner struct{ Key crypto.PrivKey }

var _ group.Signer = GroupSigner{}

// Stamp signs a numbered group message as its home.
func (s GroupSigner) Stamp(g string, epoch, seq uint64, publish []byte) ([]byte, error) {
	return protocol.Stamp(s.Key, g, epoch, seq, publish)
}
