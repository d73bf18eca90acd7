package store

import "errors"

// Sentinel errors. Every error the store returns for one of these cases
// wraps the sentinel, so callers branch with errors.Is; the wrapping text
// says what was refused and why.
var (
	// ErrCorrupt: Open found a file that is not a valid store, or a record
	// that does not decode. The file is left as it is.
	ErrCorrupt = errors.New("store: corrupt")
	// ErrOverQuota: PutOffline refused because a per-recipient or
	// per-sender quota is full.
	ErrOverQuota = errors.New("store: over quota")
	// ErrFull: the store holds MaxBytes.
	ErrFull = errors.New("store: full")
	// ErrInvalid: the caller passed a record that breaks the contract
	// (empty or oversized fields, an expiry in the past).
	ErrInvalid = errors.New("store: invalid record")
	// ErrClosed: the store has been closed.
	ErrClosed = errors.New("store: closed")
)
