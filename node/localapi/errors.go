package localapi

import "errors"

// ErrNoDaemon means no daemon answered at the data dir.
var ErrNoDaemon = errors.New("no overlayd daemon is running")

// Error is the daemon's refusal of a request: any answer other than
// 200 OK. Callers branch on it with errors.As, for instance on Status
// 404 (a recipient offline) or 503 (not attached, busy).
type Error struct {
	// Status is the HTTP status code: 4xx when the daemon refused the
	// request, 5xx when it failed or the network beyond it did.
	Status int
	// Message is the daemon's own text, the "error" of its
	// {"error": "..."} body, unchanged. When the body carried none (a
	// daemon too old for the route), it is the HTTP status, such as
	// "404 Not Found".
	Message string
}

// Error returns "daemon: " and the daemon's message: the prefix tells an
// operator reading the CLI's error that the daemon, not the CLI, said it.
func (e *Error) Error() string { return "daemon: " + e.Message }
