package protocol

import (
	"errors"
	"fmt"
)

// Reason names why a received message was refused. Reasons are metric label
// values, so the set is closed and small.
type Reason string

// The reasons an announcement is refused; see the package documentation.
const (
	ReasonOversize       Reason = "oversize"
	ReasonUndecodable    Reason = "undecodable"
	ReasonInvalid        Reason = "invalid"
	ReasonSignerMismatch Reason = "signer_mismatch"
	ReasonStaleSeq       Reason = "stale_seq"
	// ReasonDirectoryFull: the receiver remembers as many peers as it may.
	ReasonDirectoryFull Reason = "directory_full"
	// ReasonUncertified: in a certified network, a supernode announcement
	// without a supernode certificate.
	ReasonUncertified Reason = "uncertified"
	// ReasonExpired: issued_unix_ms plus the announcement's validity
	// (MissedAnnouncements clamped intervals) and ClockSkew is past: a
	// replay, or a copy delayed beyond use.
	ReasonExpired Reason = "expired"
	// ReasonFuture: issued_unix_ms is more than ClockSkew ahead of the
	// receiver's clock.
	ReasonFuture Reason = "issued_in_future"
	// ReasonRateLimited: the signer, or the peer that forwarded it, sent
	// more announcements than the receiver takes per interval. Ignored,
	// not rejected (see node/dirdriver/gossip.go).
	ReasonRateLimited Reason = "rate_limited"
	// ReasonBadSignature: a view entry's GossipSub message is not signed by
	// the peer it names, or not for the directory topic (OpenSigned). A
	// view server cannot invent an entry.
	ReasonBadSignature Reason = "bad_signature"
)

// Reasons lists every Reason, for pre-declaring metric label values.
var Reasons = []Reason{ReasonOversize, ReasonUndecodable, ReasonInvalid, ReasonSignerMismatch, ReasonStaleSeq, ReasonDirectoryFull,
	ReasonUncertified, ReasonExpired, ReasonFuture, ReasonRateLimited, ReasonBadSignature}

// ErrRejected matches every *RejectError.
var ErrRejected = errors.New("message rejected")

// RejectError is returned for a message that breaks the protocol's rules.
type RejectError struct {
	Reason Reason
	Err    error
}

func (e *RejectError) Error() string { return fmt.Sprintf("%s: %v", e.Reason, e.Err) }

// Unwrap returns the underlying error.
func (e *RejectError) Unwrap() error { return e.Err }

// Is reports whether target is ErrRejected.
func (e *RejectError) Is(target error) bool { return target == ErrRejected }

// Reject builds a *RejectError.
func Reject(r Reason, format string, args ...any) error {
	return &RejectError{Reason: r, Err: fmt.Errorf(format, args...)}
}

// ReasonOf returns the Reason of a *RejectError in err's chain, or "".
func ReasonOf(err error) Reason {
	var re *RejectError
	if errors.As(err, &re) {
		return re.Reason
	}
	return ""
}

// Refusals of the signed records a client or a group home originates
// (claims.go, direct.go, groupmsg.go) and of group names (group.go). Each
// is wrapped with the detail; receivers count them by which one matched.
var (
	// ErrClaim: a presence or membership claim that does not verify for
	// the client, supernode, session or group it is used for.
	ErrClaim = errors.New("claim refused")
	// ErrDirectSignature: a direct message not signed by its sender, or
	// altered on the way.
	ErrDirectSignature = errors.New("direct message: bad or missing sender signature")
	// ErrDirectMismatch: a direct message signed for another message ID
	// or recipient.
	ErrDirectMismatch = errors.New("direct message: signed fields do not match the frame")
	// ErrDirectDecrypt: a direct message not sealed to this recipient.
	ErrDirectDecrypt = errors.New("direct message: cannot decrypt")
	// ErrAckSignature: an ack its recipient did not sign for this
	// message and sender.
	ErrAckSignature = errors.New("ack: bad or missing recipient signature")
	// ErrKeyType: sealed direct messages need Ed25519 identities (every
	// overlayd peer's).
	ErrKeyType = errors.New("only Ed25519 peer identities can send and receive sealed direct messages")
	// ErrGroupSignature: a publish or group message whose publisher's
	// signature or home's stamp does not verify.
	ErrGroupSignature = errors.New("group message: bad or missing signature")
	// ErrGroupName: a group name CheckGroupName refuses.
	ErrGroupName = errors.New("invalid group name")
)
