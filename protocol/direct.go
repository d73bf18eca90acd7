package protocol

import (
	"bytes"
	"crypto/ecdh"
	"crypto/hpke"
	"crypto/sha512"
	"fmt"
	"time"

	"filippo.io/edwards25519"
	"github.com/libp2p/go-libp2p/core/crypto"
	cryptopb "github.com/libp2p/go-libp2p/core/crypto/pb"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"

	"github.com/overlayd/overlayd/protocol/pb"
)

// Direct messages are signed by their sender and sealed to their recipient,
// end to end: the supernodes that relay them can drop or delay them, but
// cannot read them, alter them, or forge one in another client's name. The
// recipient's ack is signed too, so no supernode can tell a sender that a
// message it dropped was delivered.
//
// Sealing: HPKE (RFC 9180) base mode with DHKEM(X25519, HKDF-SHA256),
// HKDF-SHA256 and ChaCha20-Poly1305, to the recipient's X25519 key, which is
// the Montgomery form of its Ed25519 identity key (so the key is bound to
// the peer ID with no directory of keys); the HPKE info binds the sender,
// the recipient and the message ID, so a ciphertext cannot be re-sent as
// another message or in another sender's name. Signing: a libp2p signed
// envelope of the SealedDirect (domain DirectDomain), by the sender.
const (
	DirectDomain = "overlayd-direct-message"
	AckDomain    = "overlayd-direct-ack"
	// directInfo prefixes the HPKE info.
	directInfo = "overlayd/direct/1"
	// MaxSealedDirect bounds DirectMessage.sealed: a MaxPayload payload,
	// the HPKE encapsulated key and tag, the record's fields and the
	// envelope (public key, signature, domain and type).
	MaxSealedDirect = MaxPayload + 512
	// MaxSignedAck bounds Ack.signed: an AckRecord in its envelope.
	MaxSignedAck = 512
)

// suite is the HPKE ciphersuite of direct messages.
func suite() (hpke.KEM, hpke.KDF, hpke.AEAD) {
	return hpke.DHKEM(ecdh.X25519()), hpke.HKDFSHA256(), hpke.ChaCha20Poly1305()
}

func directInfoFor(from, to peer.ID, id []byte) []byte {
	info := make([]byte, 0, len(directInfo)+len(from)+len(to)+len(id)+3)
	info = append(info, directInfo...)
	for _, b := range [][]byte{[]byte(from), []byte(to), id} {
		info = append(info, byte(len(b)))
		info = append(info, b...)
	}
	return info
}

// x25519Public is the Montgomery form of an Ed25519 public key.
func x25519Public(pub crypto.PubKey) (*ecdh.PublicKey, error) {
	if pub.Type() != cryptopb.KeyType_Ed25519 {
		return nil, ErrKeyType
	}
	raw, err := pub.Raw()
	if err != nil {
		return nil, err
	}
	p, err := new(edwards25519.Point).SetBytes(raw)
	if err != nil {
		return nil, fmt.Errorf("ed25519 public key: %w", err)
	}
	return ecdh.X25519().NewPublicKey(p.BytesMontgomery())
}

// x25519Private is the X25519 key of an Ed25519 private key: the clamped
// scalar RFC 8032 derives from its seed, whose public key is x25519Public
// of the Ed25519 public key.
func x25519Private(priv crypto.PrivKey) (*ecdh.PrivateKey, error) {
	if priv.Type() != cryptopb.KeyType_Ed25519 {
		return nil, ErrKeyType
	}
	raw, err := priv.Raw()
	if err != nil {
		return nil, err
	}
	h := sha512.Sum512(raw[:32])
	return ecdh.X25519().NewPrivateKey(h[:32])
}

// SealDirect encrypts payload to peer to and signs it as sender's message
// id, sent at sent; the result goes in DirectMessage.sealed.
func SealDirect(sender crypto.PrivKey, to peer.ID, id []byte, sent time.Time, payload []byte) ([]byte, error) {
	from, err := peer.IDFromPrivateKey(sender)
	if err != nil {
		return nil, err
	}
	toKey, err := to.ExtractPublicKey()
	if err != nil {
		return nil, fmt.Errorf("recipient key: %w", err)
	}
	xpub, err := x25519Public(toKey)
	if err != nil {
		return nil, err
	}
	pk, err := hpke.NewDHKEMPublicKey(xpub)
	if err != nil {
		return nil, err
	}
	_, kdf, aead := suite()
	ct, err := hpke.Seal(pk, kdf, aead, directInfoFor(from, to, id), payload)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	signed, err := seal(directKind.of(&pb.SealedDirect{Id: id, To: []byte(to), SentUnixMs: sent.UnixMilli(), Ciphertext: ct}), sender)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	return signed, nil
}

// OpenDirect verifies sealed as message id from peer from to the holder of
// recipient, and returns the payload and when the sender says it sent it.
// It fails with ErrDirectSignature, ErrDirectMismatch or ErrDirectDecrypt
// (wrapped); whoever relayed the frame may have forged or altered it.
func OpenDirect(recipient crypto.PrivKey, from peer.ID, id, sealed []byte) ([]byte, time.Time, error) {
	if len(sealed) == 0 || len(sealed) > MaxSealedDirect {
		return nil, time.Time{}, fmt.Errorf("%w: %d bytes", ErrDirectSignature, len(sealed))
	}
	var rec pb.SealedDirect
	env, err := record.ConsumeTypedEnvelope(sealed, directKind.of(&rec))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%w: %w", ErrDirectSignature, err)
	}
	signer, err := peer.IDFromPublicKey(env.PublicKey)
	if err != nil || signer != from {
		return nil, time.Time{}, fmt.Errorf("%w: signed by %s, not the sender %s", ErrDirectSignature, signer, from)
	}
	self, err := peer.IDFromPrivateKey(recipient)
	if err != nil {
		return nil, time.Time{}, err
	}
	if !bytes.Equal(rec.GetId(), id) || peer.ID(rec.GetTo()) != self {
		return nil, time.Time{}, ErrDirectMismatch
	}
	xpriv, err := x25519Private(recipient)
	if err != nil {
		return nil, time.Time{}, err
	}
	sk, err := hpke.NewDHKEMPrivateKey(xpriv)
	if err != nil {
		return nil, time.Time{}, err
	}
	_, kdf, aead := suite()
	payload, err := hpke.Open(sk, kdf, aead, directInfoFor(from, self, id), rec.GetCiphertext())
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%w: %w", ErrDirectDecrypt, err)
	}
	return payload, time.UnixMilli(rec.GetSentUnixMs()), nil
}

// SignAck is the recipient's signature on its ack of message id from
// sender; it goes in Ack.signed.
func SignAck(recipient crypto.PrivKey, sender peer.ID, id []byte) ([]byte, error) {
	return seal(ackKind.of(&pb.AckRecord{Id: id, Sender: []byte(sender)}), recipient)
}

// VerifyAck checks that signed is recipient's ack of message id sent by
// sender. It fails with ErrAckSignature (wrapped).
func VerifyAck(signed []byte, recipient, sender peer.ID, id []byte) error {
	if len(signed) == 0 || len(signed) > MaxSignedAck {
		return fmt.Errorf("%w: %d bytes", ErrAckSignature, len(signed))
	}
	var rec pb.AckRecord
	env, err := record.ConsumeTypedEnvelope(signed, ackKind.of(&rec))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrAckSignature, err)
	}
	signer, err := peer.IDFromPublicKey(env.PublicKey)
	if err != nil || signer != recipient {
		return fmt.Errorf("%w: signed by %s, not the recipient %s", ErrAckSignature, signer, recipient)
	}
	if !bytes.Equal(rec.GetId(), id) || peer.ID(rec.GetSender()) != sender {
		return fmt.Errorf("%w: signed for another message", ErrAckSignature)
	}
	return nil
}

// VerifyDirectSender checks, without decrypting, that sealed is signed by
// from as its message id to peer to: what a supernode storing the message
// for an offline recipient can check, so that nobody can store messages
// (and spend quotas) in another sender's name. It fails with
// ErrDirectSignature or ErrDirectMismatch (wrapped). The recipient still
// opens the message with OpenDirect, which checks the same and decrypts.
func VerifyDirectSender(from, to peer.ID, id, sealed []byte) error {
	if len(sealed) == 0 || len(sealed) > MaxSealedDirect {
		return fmt.Errorf("%w: %d bytes", ErrDirectSignature, len(sealed))
	}
	var rec pb.SealedDirect
	env, err := record.ConsumeTypedEnvelope(sealed, directKind.of(&rec))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDirectSignature, err)
	}
	signer, err := peer.IDFromPublicKey(env.PublicKey)
	if err != nil || signer != from {
		return fmt.Errorf("%w: signed by %s, not the sender %s", ErrDirectSignature, signer, from)
	}
	if !bytes.Equal(rec.GetId(), id) || peer.ID(rec.GetTo()) != to {
		return fmt.Errorf("%w: signed for another message or recipient", ErrDirectMismatch)
	}
	return nil
}
