package localapi

import "time"

// Relay is the reachability and circuit-relay part of the status.
type Relay struct {
	// Reachability is what the node knows of its public reachability:
	// public, private or unknown (pinned, or learnt from AutoNAT).
	Reachability string `json:"reachability"`
	// Service is a supernode's relay service while it runs.
	Service *RelayService `json:"service,omitempty"`
	// Reservation is the relay slot an unreachable ordinary node holds on
	// its supernode.
	Reservation *RelayReservation `json:"reservation,omitempty"`
	// Refused counts the relay requests this node refused, by kind:
	// reservation, circuit, not_attached.
	Refused map[string]uint64 `json:"refused,omitempty"`
}

// RelayService is a supernode's circuit relay: reservations and circuits
// held now, and their bounds.
type RelayService struct {
	Reservations    int `json:"reservations"`
	Circuits        int `json:"circuits"`
	MaxReservations int `json:"max_reservations"`
	MaxCircuits     int `json:"max_circuits"`
	PerIP           int `json:"reservations_per_ip"`
}

// RelayReservation is a relay slot held on a supernode, and the relayed
// addresses it gives this node.
type RelayReservation struct {
	Relay   string    `json:"relay"`
	Since   time.Time `json:"since"`
	Expires time.Time `json:"expires"`
	Addrs   []string  `json:"addrs"`
}

// PingRequest is the body of POST /v1/ping. WaitMs is how long to wait,
// after a relayed ping, for hole punching to open a direct connection
// (0: do not wait).
type PingRequest struct {
	Peer   string `json:"peer"`
	Count  int    `json:"count,omitempty"`
	WaitMs int    `json:"wait_ms,omitempty"`
}

// PingResponse reports a ping: the path the first ping took (direct or
// relayed, and through which supernode), round-trip times in
// milliseconds, and whether the connection became direct.
type PingResponse struct {
	Peer         string    `json:"peer"`
	Path         string    `json:"path"`
	Relay        string    `json:"relay,omitempty"`
	Addr         string    `json:"addr,omitempty"`
	ConnectMs    float64   `json:"connect_ms"`
	RTTMs        []float64 `json:"rtt_ms"`
	BecameDirect bool      `json:"became_direct"`
	DirectRTTMs  []float64 `json:"direct_rtt_ms,omitempty"`
	DirectAddr   string    `json:"direct_addr,omitempty"`
}
