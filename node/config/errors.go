package config

import "fmt"

// Error names the option that is wrong and why. Validate returns it for
// bad configuration, and the node for a configured file it cannot use.
type Error struct {
	Field string // the option, as a flag: "--role"
	Value string
	Err   error
}

func (e *Error) Error() string {
	return fmt.Sprintf("invalid %s %q: %v", e.Field, e.Value, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }
