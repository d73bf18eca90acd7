package protocol

import (
	"fmt"
	"unicode/utf8"

	"github.com/overlayd/overlayd/protocol/pb"
)

// TunnelID is the stream protocol of tunnels: a connecting peer carries one
// TCP connection to a service another peer exposes. TunnelOpen, then
// TunnelOpenResponse, then (on TUNNEL_OK) TunnelFrames both ways. See the
// package documentation.
const TunnelID = "/overlayd/tunnel/1.0.0"

// Tunnel limits.
const (
	// MaxTunnelServiceName is the longest service name, in bytes.
	MaxTunnelServiceName = 64
	// TunnelIDLen is the length of a tunnel connection's ID.
	TunnelIDLen = 16
	// MaxTunnelDetail bounds the detail of an answer and the reason of a
	// reset, in bytes.
	MaxTunnelDetail = 256
	// MaxTunnelOpenFrame bounds TunnelOpen and TunnelOpenResponse.
	MaxTunnelOpenFrame = 512
	// MaxTunnelData is the most bytes one TunnelFrame carries.
	MaxTunnelData = 32 << 10
	// MaxTunnelFrame bounds a TunnelFrame: data plus its fields.
	MaxTunnelFrame = MaxTunnelData + MaxTunnelDetail + 64
)

// ValidServiceName reports whether name can name an exposed service: 1 to
// MaxTunnelServiceName bytes of letters, digits, '-', '_' and '.', so it
// is one path segment and one command-line word.
func ValidServiceName(name string) error {
	if name == "" || len(name) > MaxTunnelServiceName {
		return fmt.Errorf("service name %q: must be 1 to %d bytes", name, MaxTunnelServiceName)
	}
	for _, r := range name {
		ok := r == '-' || r == '_' || r == '.' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9')
		if !ok {
			return fmt.Errorf("service name %q: only letters, digits, '-', '_' and '.'", name)
		}
	}
	if name == "." || name == ".." {
		return fmt.Errorf("service name %q is reserved", name)
	}
	return nil
}

// CheckTunnelOpen checks a decoded TunnelOpen: a new connection names a
// valid service, every request carries a tunnel ID of TunnelIDLen bytes.
func CheckTunnelOpen(m *pb.TunnelOpen) error {
	if len(m.GetTunnelId()) != TunnelIDLen {
		return Reject(ReasonInvalid, "tunnel id: %d bytes, want %d", len(m.GetTunnelId()), TunnelIDLen)
	}
	if err := ValidServiceName(m.GetService()); err != nil {
		return Reject(ReasonInvalid, "%v", err)
	}
	if !m.GetResume() && m.GetReceived() != 0 {
		return Reject(ReasonInvalid, "received %d on a new connection", m.GetReceived())
	}
	return nil
}

// CheckTunnelFrame checks a decoded TunnelFrame against the limits.
func CheckTunnelFrame(m *pb.TunnelFrame) error {
	if len(m.GetData()) > MaxTunnelData {
		return Reject(ReasonOversize, "tunnel data: %d bytes, limit %d", len(m.GetData()), MaxTunnelData)
	}
	if len(m.GetReason()) > MaxTunnelDetail || !utf8.ValidString(m.GetReason()) {
		return Reject(ReasonInvalid, "tunnel reset reason: %d bytes", len(m.GetReason()))
	}
	if m.GetOffset() > 1<<62 {
		return Reject(ReasonInvalid, "tunnel offset %d", m.GetOffset())
	}
	return nil
}

// ShortDetail cuts s to MaxTunnelDetail bytes at a rune boundary.
func ShortDetail(s string) string {
	if len(s) <= MaxTunnelDetail {
		return s
	}
	s = s[:MaxTunnelDetail]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
