package node

import (
	"errors"
	"fmt"
)

// ErrNotSupernode is returned by Promote on a node that does not run the
// supernode role.
var ErrNotSupernode = errors.New("this node is not a supernode: start it with --role supernode to make it promotable")

// errNoClient answers messaging requests on a pinned supernode, which has
// no client side (it relays messages; it does not send or receive them).
var errNoClient = errors.New("only ordinary and auto nodes send and receive messages; a --role supernode node relays them")

// ConfigError names the option that is wrong and why. Validate, New and
// Start return it for bad configuration.
type ConfigError struct {
	Field string // the option, as a flag: "--role"
	Value string
	Err   error
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("invalid %s %q: %v", e.Field, e.Value, e.Err)
}

// Unwrap returns the cause.
func (e *ConfigError) Unwrap() error { return e.Err }
