package protocol

import (
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/record"
	"google.golang.org/protobuf/proto"
)

// recordKind is one kind of signed record: the domain its signature
// covers and the payload type its envelope names. Each record a peer
// originates has a kind of its own, so a signature over one kind can never
// be taken for another.
type recordKind struct {
	domain string
	codec  []byte
}

// The kinds of the records clients and group homes originate.
var (
	presenceKind   = recordKind{PresenceDomain, []byte("/overlayd/presence-claim")}
	membershipKind = recordKind{MembershipDomain, []byte("/overlayd/membership-claim")}
	directKind     = recordKind{DirectDomain, []byte("/overlayd/direct-message")}
	ackKind        = recordKind{AckDomain, []byte("/overlayd/direct-ack")}
	publishKind    = recordKind{PublishDomain, []byte("/overlayd/group-publish")}
	stampKind      = recordKind{StampDomain, []byte("/overlayd/group-stamp")}
)

// of wraps msg as a record of this kind: to seal, or (msg pointing at an
// empty message) to receive a consumed envelope's payload.
func (k recordKind) of(msg proto.Message) *envelopeRecord { return &envelopeRecord{k, msg} }

// envelopeRecord is a protobuf message in a libp2p signed envelope
// (core/record.Record).
type envelopeRecord struct {
	kind recordKind
	msg  proto.Message
}

var _ record.Record = (*envelopeRecord)(nil)

func (r *envelopeRecord) Domain() string                 { return r.kind.domain }
func (r *envelopeRecord) Codec() []byte                  { return r.kind.codec }
func (r *envelopeRecord) MarshalRecord() ([]byte, error) { return proto.Marshal(r.msg) }
func (r *envelopeRecord) UnmarshalRecord(b []byte) error { return proto.Unmarshal(b, r.msg) }

// seal signs rec with key and returns the envelope's bytes.
func seal(rec record.Record, key crypto.PrivKey) ([]byte, error) {
	env, err := record.Seal(rec, key)
	if err != nil {
		return nil, err
	}
	return env.Marshal()
}
