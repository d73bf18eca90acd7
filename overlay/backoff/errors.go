package backoff

import "errors"

// ErrInvalidPolicy is wrapped by every error from [Policy.Validate] and by
// [New] when given an invalid policy; the message names the bad field.
var ErrInvalidPolicy = errors.New("invalid backoff policy")
