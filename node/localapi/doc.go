// Package localapi is the daemon's control API for local programs and the
// CLI: HTTP with JSON bodies over a unix socket in the data dir (mode 0600,
// inside a 0700 directory, so only the daemon's user can reach it), or, when
// asked, over loopback TCP with a bearer token stored in the data dir.
//
// Endpoints (all GET, all JSON):
//
//	/v1/status      Status
//	/v1/peers       []Peer
//	/v1/supernodes  []Supernode
//	/v1/ring        Ring
//
// Errors are JSON {"error": "..."} with a 4xx or 5xx status.
package localapi
