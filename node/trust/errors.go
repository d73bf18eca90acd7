package trust

import "errors"

var (
	// ErrNotServing is returned by Promote on a node that does not play
	// the supernode role now.
	ErrNotServing = errors.New("this node does not play the supernode role now")
	// ErrNotMega is returned by Demote on a node that is not a
	// mega-supernode.
	ErrNotMega = errors.New("this node is not a mega-supernode")
	// errNoTopic is returned by Revoke before JoinRevocations.
	errNoTopic = errors.New("the revocation topic is not joined")
)
