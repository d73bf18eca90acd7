package capacity

import (
	"errors"
	"fmt"
	"time"
)

// ErrBusy is matched (with errors.Is) by every [*BusyError]: the guarded
// resource is at capacity and the caller should retry later, honouring the
// retry-after hint carried by the [*BusyError].
var ErrBusy = errors.New("busy")

// ErrNotHeld is returned by [Semaphore.Release] when no slot is held. It
// always indicates a bug in the caller (a double release, or a release
// without a successful acquire); the semaphore is left unchanged.
var ErrNotHeld = errors.New("capacity: release of a slot that is not held")

// BusyError is the refusal returned when a [Semaphore] is at capacity. It is
// the typed form of the protocol's BUSY answer: handlers copy Resource and
// RetryAfter into the refusal they send to the peer.
//
// Values returned by a [Semaphore] are shared between refusals and must not
// be modified.
type BusyError struct {
	// Resource is the name of the semaphore that refused, e.g.
	// "attached_peers".
	Resource string
	// RetryAfter is the server's hint for the earliest useful retry. Zero
	// means no hint. Clients add jitter on top of it (package
	// overlay/backoff); the server does not.
	RetryAfter time.Duration
}

// Error implements error.
func (e *BusyError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("busy: %s at capacity, retry after %v", e.Resource, e.RetryAfter)
	}
	return fmt.Sprintf("busy: %s at capacity", e.Resource)
}

// Is reports whether target is [ErrBusy], so that errors.Is(err, ErrBusy)
// holds for every BusyError.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }
