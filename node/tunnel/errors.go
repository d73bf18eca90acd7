package tunnel

import (
	"errors"
	"fmt"

	"github.com/overlayd/overlayd/protocol/pb"
)

// Errors callers branch on.
var (
	// ErrInvalid: a bad name, address or allow-list.
	ErrInvalid = errors.New("invalid tunnel request")
	// ErrExists: the service is exposed already.
	ErrExists = errors.New("exists")
	// ErrNotFound: no such service or connect listener.
	ErrNotFound = errors.New("not found")
	// ErrLimit: the services or connect listeners are at their bound.
	ErrLimit = errors.New("limit reached")
	// ErrClosed: the Manager is closed.
	ErrClosed = errors.New("tunnels closed")
	// ErrRelayCut: a relayed connection ended (the relay's limit) and no
	// direct connection could be made.
	ErrRelayCut = errors.New("the relay cut the tunnel")
	// ErrRelayBusy: the supernode relaying to the peer refused the circuit
	// (relay v2 status RESOURCE_LIMIT_EXCEEDED, or PERMISSION_DENIED, which an
	// overlayd supernode answers when its circuit bound is reached or when this
	// peer or the target is over its relay byte or rate budget; the status
	// does not say which).
	ErrRelayBusy = errors.New("supernode relay busy or relay budget exhausted")
)

// RefusedError is the exposing peer's refusal of a connection.
type RefusedError struct {
	Status pb.TunnelStatus
	Detail string
}

func (e *RefusedError) Error() string {
	what := map[pb.TunnelStatus]string{
		pb.TunnelStatus_TUNNEL_REFUSED:         "refused: not on the service's allow-list",
		pb.TunnelStatus_TUNNEL_NO_SUCH_SERVICE: "no such service",
		pb.TunnelStatus_TUNNEL_BUSY:            "busy",
		pb.TunnelStatus_TUNNEL_UNAVAILABLE:     "the service is unavailable on its peer",
		pb.TunnelStatus_TUNNEL_NO_SUCH_TUNNEL:  "no such tunnel connection",
		pb.TunnelStatus_TUNNEL_BAD_REQUEST:     "bad request",
	}[e.Status]
	if what == "" {
		what = fmt.Sprintf("status %v", e.Status)
	}
	if e.Detail != "" {
		return what + ": " + e.Detail
	}
	return what
}
