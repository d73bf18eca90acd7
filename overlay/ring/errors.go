package ring

import "errors"

// Errors returned by New, WithPointsPerWeight and NewMigration, wrapped
// with the operation and the offending value; test with errors.Is.
var (
	// ErrNoMembers: New was given an empty member list.
	ErrNoMembers = errors.New("no members")
	// ErrEmptyID: a member has an empty ID.
	ErrEmptyID = errors.New("empty member id")
	// ErrDuplicateID: two members share an ID.
	ErrDuplicateID = errors.New("duplicate member id")
	// ErrBadWeight: a member's weight is below 1.
	ErrBadWeight = errors.New("member weight below 1")
	// ErrTooManyMembers: more than MaxMembers members, which a point's
	// 16-bit member index cannot address.
	ErrTooManyMembers = errors.New("too many members")
	// ErrTooManyPoints: a member's or the ring's points exceed MaxPoints.
	ErrTooManyPoints = errors.New("too many points")
	// ErrBadPointsPerWeight: WithPointsPerWeight got a value outside
	// [1, MaxPoints].
	ErrBadPointsPerWeight = errors.New("points per weight out of range")
	// ErrNilRing: NewMigration was given a nil ring.
	ErrNilRing = errors.New("nil ring")
	// ErrBadPercent: NewMigration got a percentage outside [0, 100].
	ErrBadPercent = errors.New("migration percent out of range")
)
