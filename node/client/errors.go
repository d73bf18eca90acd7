package client

import (
	"errors"
	"fmt"

	"github.com/overlayd/overlayd/protocol"
)

// Errors of Send, Publish, Members and Locate; callers branch on them with
// errors.Is. The returned errors wrap them with details.
var (
	// ErrNotAttached: the client has no session right now (it is
	// attaching or failing over).
	ErrNotAttached = errors.New("not attached to a supernode")
	// ErrOffline: the recipient is not attached to any supernode.
	ErrOffline = errors.New("recipient is offline: not attached to any supernode")
	// ErrOverQuota: the recipient is offline and its home cluster
	// refused to store the message: a quota (the recipient's, the
	// sender's, or a supernode's store) is full. Retrying soon will not
	// help; the detail names the quota.
	ErrOverQuota = errors.New("recipient is offline and its home cluster's store is over quota")
	// ErrUnreachable: the recipient's supernode could not be reached.
	ErrUnreachable = errors.New("recipient's supernode cannot be reached")
	// ErrBusy: a supernode on the path refused for capacity.
	ErrBusy = errors.New("supernode busy")
	// ErrInvalid: the request itself is wrong; retrying will not help.
	ErrInvalid = errors.New("invalid request")
	// ErrTooLarge: the payload exceeds protocol.MaxPayload.
	ErrTooLarge = fmt.Errorf("%w: payload larger than %d bytes", ErrInvalid, protocol.MaxPayload)
	// ErrNoAck: no acknowledgement arrived after every attempt.
	ErrNoAck = errors.New("no acknowledgement from the recipient")
	// ErrNotLocated: no supernode knows where the peer is attached.
	ErrNotLocated = errors.New("peer not located: not attached to any supernode")
)

// errAttach marks protocol failures of one attach attempt.
var errAttach = errors.New("attach")
