package protocol

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/protocol/pb"
)

// Operator certificates and revocations.
//
// An operator's Ed25519 key signs, in a libp2p signed envelope (go-libp2p
// core/record), a certificate naming the subject peer, its capacity, a
// validity window and a serial; or a MegaRevocation of a serial. There are
// two kinds of certificate, each in an envelope domain of its own so that a
// signature over one can never be read as the other: a mega-supernode
// certificate (MegaCertDomain) and a supernode certificate
// (SupernodeCertDomain), whose capacity is a ceiling. Both carry a
// pb.MegaCertificate whose role must match the domain. A receiver treats a
// peer as certified only while VerifyMegaCert (or VerifySupernodeCert)
// accepts its certificate: signed by a trusted operator key (not the
// subject's own), of the right kind, for that very peer, inside its
// validity window within ClockSkew, and not revoked. Everything else is
// refused with a reason in CertReasons, counted, and changes nothing. One
// revocation revokes a serial whichever kind of certificate carries it.
const (
	MegaCertDomain = "overlayd-mega-certificate"
	// SupernodeCertDomain is the envelope domain of supernode certificates.
	SupernodeCertDomain = "overlayd-supernode-certificate"
	RevocationDomain    = "overlayd-mega-revocation"
	// RevocationTopic is the GossipSub topic revocations travel on.
	RevocationTopic = "/overlayd/revocations/1"
	// MaxCertSize bounds an encoded certificate or revocation envelope.
	MaxCertSize = 1024
	// ClockSkew is tolerated at both ends of a validity window.
	ClockSkew = 30 * time.Second
)

var (
	megaCertCodec      = []byte("/overlayd/mega-cert/1")
	supernodeCertCodec = []byte("/overlayd/supernode-cert/1")
	revocationCodec    = []byte("/overlayd/mega-revocation/1")
)

// Certificate refusal reasons (metric label values).
const (
	CertOversize     Reason = "cert_oversize"
	CertMalformed    Reason = "cert_malformed"
	CertSignature    Reason = "cert_signature" // bad signature or another domain: the signature covers the domain
	CertSelfSigned   Reason = "cert_self_signed"
	CertUntrusted    Reason = "cert_untrusted_key"
	CertWrongSubject Reason = "cert_wrong_subject"
	CertExpired      Reason = "cert_expired"
	CertNotYetValid  Reason = "cert_not_yet_valid"
	CertRevoked      Reason = "cert_revoked"
	// CertWrongRole: a valid envelope of the other kind, e.g. a
	// mega-supernode certificate where a supernode certificate is needed.
	CertWrongRole Reason = "cert_wrong_role"
)

// CertReasons lists every certificate refusal reason.
var CertReasons = []Reason{CertOversize, CertMalformed, CertSignature, CertSelfSigned, CertUntrusted,
	CertWrongSubject, CertExpired, CertNotYetValid, CertRevoked, CertWrongRole}

// Cert is a decoded operator certificate. Which kind it is follows from the
// function that verified it.
type Cert struct {
	Subject peer.ID
	// Capacity is the capacity a mega-supernode takes, and for a supernode
	// the ceiling of the capacity its peers record for it.
	Capacity  uint32
	NotBefore time.Time
	NotAfter  time.Time
	Serial    uint64
}

// MegaCert is a mega-supernode certificate.
type MegaCert = Cert

// SupernodeCert is a supernode certificate of a certified network.
type SupernodeCert = Cert

// certEnvelope is a certificate record of either kind.
type certEnvelope interface {
	record.Record
	payload() *pb.MegaCertificate
}

// certRecord is a mega-supernode certificate.
type certRecord struct{ pb.MegaCertificate }

func (*certRecord) Domain() string                 { return MegaCertDomain }
func (*certRecord) Codec() []byte                  { return megaCertCodec }
func (r *certRecord) payload() *pb.MegaCertificate { return &r.MegaCertificate }
func (r *certRecord) MarshalRecord() ([]byte, error) {
	return proto.Marshal(&r.MegaCertificate)
}
func (r *certRecord) UnmarshalRecord(b []byte) error {
	return proto.Unmarshal(b, &r.MegaCertificate)
}

// supernodeCertRecord is a supernode certificate: the same payload in a
// domain of its own.
type supernodeCertRecord struct{ certRecord }

func (*supernodeCertRecord) Domain() string { return SupernodeCertDomain }
func (*supernodeCertRecord) Codec() []byte  { return supernodeCertCodec }

// newCertRecord returns an empty record of the kind of role.
func newCertRecord(role pb.Role) certEnvelope {
	if role == pb.Role_ROLE_MEGA {
		return &certRecord{}
	}
	return &supernodeCertRecord{}
}

func roleName(role pb.Role) string {
	if role == pb.Role_ROLE_MEGA {
		return "mega-supernode"
	}
	return "supernode"
}

type revocationRecord struct{ pb.MegaRevocation }

func (*revocationRecord) Domain() string { return RevocationDomain }
func (*revocationRecord) Codec() []byte  { return revocationCodec }
func (r *revocationRecord) MarshalRecord() ([]byte, error) {
	return proto.Marshal(&r.MegaRevocation)
}
func (r *revocationRecord) UnmarshalRecord(b []byte) error {
	return proto.Unmarshal(b, &r.MegaRevocation)
}

// NewSerial returns a random certificate serial.
func NewSerial() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:]) >> 1 // positive as int64 too
}

// SealMegaCert signs a mega-supernode certificate with the operator key.
func SealMegaCert(c MegaCert, operator crypto.PrivKey) ([]byte, error) {
	return sealCert(c, pb.Role_ROLE_MEGA, operator)
}

// SealSupernodeCert signs a supernode certificate with the operator key;
// c.Capacity is the ceiling.
func SealSupernodeCert(c SupernodeCert, operator crypto.PrivKey) ([]byte, error) {
	return sealCert(c, pb.Role_ROLE_SUPERNODE, operator)
}

func sealCert(c Cert, role pb.Role, operator crypto.PrivKey) ([]byte, error) {
	if c.Subject == "" || c.Capacity == 0 || !c.NotAfter.After(c.NotBefore) || c.Serial == 0 {
		return nil, errors.New("seal certificate: need a subject, capacity >= 1, not-after after not-before and a serial")
	}
	rec := newCertRecord(role)
	*rec.payload() = pb.MegaCertificate{
		Subject: []byte(c.Subject), Role: role, Capacity: c.Capacity,
		NotBeforeUnix: c.NotBefore.Unix(), NotAfterUnix: c.NotAfter.Unix(), Serial: c.Serial,
	}
	env, err := record.Seal(rec, operator)
	if err != nil {
		return nil, fmt.Errorf("seal certificate: %w", err)
	}
	return env.Marshal()
}

// SealRevocation signs a revocation of serial, valid until notAfter (the
// revoked certificate's expiry).
func SealRevocation(serial uint64, issued, notAfter time.Time, operator crypto.PrivKey) ([]byte, error) {
	env, err := record.Seal(&revocationRecord{pb.MegaRevocation{Serial: serial, IssuedUnix: issued.Unix(), NotAfterUnix: notAfter.Unix()}}, operator)
	if err != nil {
		return nil, fmt.Errorf("seal revocation: %w", err)
	}
	return env.Marshal()
}

// trustedKey reports whether k is one of trusted.
func trustedKey(k crypto.PubKey, trusted []crypto.PubKey) bool {
	for _, t := range trusted {
		if t.Equals(k) {
			return true
		}
	}
	return false
}

// VerifyMegaCert checks a mega-supernode certificate presented by (or for)
// subject at time now. revoked may be nil. Errors are *RejectError with a
// CertReason.
func VerifyMegaCert(b []byte, trusted []crypto.PubKey, subject peer.ID, now time.Time, revoked func(serial uint64) bool) (MegaCert, error) {
	return verifyCert(b, pb.Role_ROLE_MEGA, trusted, subject, now, revoked)
}

// VerifySupernodeCert checks a supernode certificate presented by (or for)
// subject at time now, by the same rules as VerifyMegaCert; a
// mega-supernode certificate is refused with CertWrongRole. revoked may be
// nil. Errors are *RejectError with a CertReason.
func VerifySupernodeCert(b []byte, trusted []crypto.PubKey, subject peer.ID, now time.Time, revoked func(serial uint64) bool) (SupernodeCert, error) {
	return verifyCert(b, pb.Role_ROLE_SUPERNODE, trusted, subject, now, revoked)
}

func verifyCert(b []byte, role pb.Role, trusted []crypto.PubKey, subject peer.ID, now time.Time, revoked func(serial uint64) bool) (Cert, error) {
	if len(b) > MaxCertSize {
		return Cert{}, Reject(CertOversize, "certificate of %d bytes, limit %d", len(b), MaxCertSize)
	}
	rec := newCertRecord(role)
	env, err := record.ConsumeTypedEnvelope(b, rec)
	if err != nil {
		if env == nil {
			return Cert{}, Reject(CertMalformed, "certificate: %v", err)
		}
		other := pb.Role_ROLE_MEGA
		if role == pb.Role_ROLE_MEGA {
			other = pb.Role_ROLE_SUPERNODE
		}
		if _, err := record.ConsumeTypedEnvelope(b, newCertRecord(other)); err == nil {
			return Cert{}, Reject(CertWrongRole, "a %s certificate where a %s certificate is needed", roleName(other), roleName(role))
		}
		return Cert{}, Reject(CertSignature, "certificate signature (or domain): %v", err)
	}
	if string(env.PayloadType) != string(rec.Codec()) {
		return Cert{}, Reject(CertMalformed, "certificate payload type %q", env.PayloadType)
	}
	p := rec.payload()
	c := Cert{Capacity: p.GetCapacity(), Serial: p.GetSerial(),
		NotBefore: time.Unix(p.GetNotBeforeUnix(), 0), NotAfter: time.Unix(p.GetNotAfterUnix(), 0)}
	if c.Subject, err = peer.IDFromBytes(p.GetSubject()); err != nil || p.GetRole() != role || c.Capacity == 0 || c.Serial == 0 {
		return Cert{}, Reject(CertMalformed, "certificate fields (subject, role, capacity, serial)")
	}
	if !trustedKey(env.PublicKey, trusted) {
		if signer, err := peer.IDFromPublicKey(env.PublicKey); err == nil && signer == c.Subject {
			return Cert{}, Reject(CertSelfSigned, "certificate signed by its own subject")
		}
		return Cert{}, Reject(CertUntrusted, "certificate signed by a key that is not a trusted operator key")
	}
	switch {
	case c.Subject != subject:
		return Cert{}, Reject(CertWrongSubject, "certificate for %s presented by %s", c.Subject, subject)
	case now.Before(c.NotBefore.Add(-ClockSkew)):
		return Cert{}, Reject(CertNotYetValid, "certificate valid from %s", c.NotBefore.UTC().Format(time.RFC3339))
	case now.After(c.NotAfter.Add(ClockSkew)):
		return Cert{}, Reject(CertExpired, "certificate expired at %s", c.NotAfter.UTC().Format(time.RFC3339))
	case revoked != nil && revoked(c.Serial):
		return Cert{}, Reject(CertRevoked, "certificate serial %d is revoked", c.Serial)
	}
	return c, nil
}

// Revocation is a verified revocation.
type Revocation struct {
	Serial   uint64
	NotAfter time.Time
}

// VerifyRevocation checks a revocation against the trusted operator keys.
func VerifyRevocation(b []byte, trusted []crypto.PubKey) (Revocation, error) {
	if len(b) > MaxCertSize {
		return Revocation{}, Reject(CertOversize, "revocation of %d bytes, limit %d", len(b), MaxCertSize)
	}
	var rec revocationRecord
	env, err := record.ConsumeTypedEnvelope(b, &rec)
	if err != nil {
		if env == nil {
			return Revocation{}, Reject(CertMalformed, "revocation: %v", err)
		}
		return Revocation{}, Reject(CertSignature, "revocation signature (or domain): %v", err)
	}
	if !trustedKey(env.PublicKey, trusted) {
		return Revocation{}, Reject(CertUntrusted, "revocation signed by a key that is not a trusted operator key")
	}
	if rec.GetSerial() == 0 {
		return Revocation{}, Reject(CertMalformed, "revocation serial 0")
	}
	return Revocation{Serial: rec.GetSerial(), NotAfter: time.Unix(rec.GetNotAfterUnix(), 0)}, nil
}

// EncodeKey and DecodeKey give an operator public key a form that fits on
// a command line: "ed25519:" + base64url (no padding) of the raw key.
func EncodeKey(k crypto.PubKey) (string, error) {
	raw, err := k.Raw()
	if err != nil {
		return "", err
	}
	if k.Type() != crypto.Ed25519 {
		return "", errors.New("operator keys are Ed25519")
	}
	return "ed25519:" + base64.RawURLEncoding.EncodeToString(raw), nil
}

// DecodeKey parses EncodeKey's form.
func DecodeKey(s string) (crypto.PubKey, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), "ed25519:")
	if !ok {
		return nil, errors.New(`operator public key must start with "ed25519:"`)
	}
	raw, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("operator public key: %v", err)
	}
	k, err := crypto.UnmarshalEd25519PublicKey(raw)
	if err != nil {
		return nil, fmt.Errorf("operator public key: %v", err)
	}
	return k, nil
}

// EncodeBlob and DecodeBlob are the text form of certificates and
// revocations in files and on the command line: base64 (standard, padded)
// on one line; surrounding white space is ignored.
func EncodeBlob(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// DecodeBlob parses EncodeBlob's form.
func DecodeBlob(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("not a base64 certificate or revocation: %v", err)
	}
	return b, nil
}
