package fanout

import "errors"

// ErrBusy is returned by [Engine.Fanout] when the engine already has its
// maximum number of jobs in flight (see [WithMaxJobs]). Nothing was queued
// and the done callback will not be called. The caller should answer BUSY
// upstream (package supernode/capacity's BusyError carries the retry-after
// hint) or retry later; the queue never grows past its bound.
var ErrBusy = errors.New("fanout: busy: job queue full")

// ErrClosed is returned by [Engine.Fanout] after [Engine.Close] has begun.
// Nothing was queued and the done callback will not be called.
var ErrClosed = errors.New("fanout: engine closed")

// ErrNotStarted is returned by [Engine.Fanout] before [Engine.Start]. It
// indicates a bug in the caller's lifecycle.
var ErrNotStarted = errors.New("fanout: engine not started")

// errForeignGroup is returned by Fanout for a nil group or a group made by
// another engine (its partition does not match this engine's workers).
// Preallocated so that no error path of Fanout allocates.
var errForeignGroup = errors.New("fanout: group is nil or belongs to another engine")
