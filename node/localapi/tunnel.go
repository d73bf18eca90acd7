package localapi

import "time"

// Tunnels: a node exposes local TCP services to chosen peers, and carries
// the connections of a local listener to a service another peer exposes
// (package node/tunnel).

// ExposeRequest is the body of POST /v1/tunnels/expose: make Target, a
// local host:port, reachable as Name by the peers in Allow, or by any peer
// when AllowAny is set (exactly one of the two).
type ExposeRequest struct {
	Name     string   `json:"name"`
	Target   string   `json:"target"`
	Allow    []string `json:"allow,omitempty"`
	AllowAny bool     `json:"allow_any,omitempty"`
}

// UnexposeRequest is the body of POST /v1/tunnels/unexpose.
type UnexposeRequest struct {
	Name string `json:"name"`
}

// ConnectRequest is the body of POST /v1/tunnels/connect: open a listener
// on Listen (host:port; port 0 picks one) whose connections are carried to
// Service on Peer.
type ConnectRequest struct {
	Peer    string `json:"peer"`
	Service string `json:"service"`
	Listen  string `json:"listen"`
}

// DisconnectRequest is the body of POST /v1/tunnels/disconnect: close the
// listener on Listen (the address connect answered with) and its open
// connections.
type DisconnectRequest struct {
	Listen string `json:"listen"`
}

// Tunnels is GET /v1/tunnels: both sides of this node's tunnels.
type Tunnels struct {
	Exposed  []ExposedService `json:"exposed"`
	Connects []TunnelConnect  `json:"connects"`
	// Window is the flow-control window, in bytes: the most a side of a
	// connection holds unacknowledged.
	Window int `json:"window"`
}

// ExposedService is one exposed service and its counters.
type ExposedService struct {
	Name   string `json:"name"`
	Target string `json:"target"`
	// Allow lists the peers that may connect; AllowAny: every peer may.
	Allow    []string `json:"allow,omitempty"`
	AllowAny bool     `json:"allow_any"`
	Open     int      `json:"open"`
	Total    uint64   `json:"total"`
	// BytesIn came from the peers (and went to the service), BytesOut
	// went to them.
	BytesIn  uint64 `json:"bytes_in"`
	BytesOut uint64 `json:"bytes_out"`
	// Refused counts connections refused for the allow-list, Busy those
	// refused at the connection limit, Unavailable those whose local
	// service could not be reached.
	Refused     uint64       `json:"refused"`
	Busy        uint64       `json:"busy"`
	Unavailable uint64       `json:"unavailable"`
	Conns       []TunnelConn `json:"conns,omitempty"`
}

// TunnelConnect is one connect listener and its counters.
type TunnelConnect struct {
	Listen  string `json:"listen"`
	Peer    string `json:"peer"`
	Service string `json:"service"`
	Open    int    `json:"open"`
	Total   uint64 `json:"total"`
	// BytesIn came from the remote service, BytesOut went to it.
	BytesIn  uint64 `json:"bytes_in"`
	BytesOut uint64 `json:"bytes_out"`
	// Failed counts connections that could not be opened (refused, busy,
	// no path); LastError says why the last one failed or was cut.
	Failed    uint64 `json:"failed"`
	LastError string `json:"last_error,omitempty"`
	// Migrations counts connections moved to a new stream (a direct
	// connection after hole punching, or after the relay cut the old
	// one); RelayCuts counts connections closed because the relayed
	// circuit ended and no direct path could be made.
	Migrations uint64       `json:"migrations"`
	RelayCuts  uint64       `json:"relay_cuts"`
	Conns      []TunnelConn `json:"conns,omitempty"`
}

// TunnelConn is one open tunnel connection.
type TunnelConn struct {
	ID   string `json:"id"`
	Peer string `json:"peer"`
	// Path is direct, relayed, or moving (between streams).
	Path      string    `json:"path"`
	Since     time.Time `json:"since"`
	BytesIn   uint64    `json:"bytes_in"`
	BytesOut  uint64    `json:"bytes_out"`
	Migration int       `json:"migrations"`
	// Buffered is what this side holds unacknowledged now, MaxBuffered
	// the most it held; both stay within the window.
	Buffered    int `json:"buffered"`
	MaxBuffered int `json:"max_buffered"`
}
