package protocol

import (
	"crypto/rand"
	"time"
)

// Version is the overlayd protocol version carried in announcements.
const Version = 1

// DirectoryTopic is the GossipSub topic of supernode announcements.
const DirectoryTopic = "/overlayd/supernodes/1"

// Limits of the directory protocol.
const (
	// MaxAnnouncementSize is the largest announcement accepted, in bytes.
	MaxAnnouncementSize = 4 << 10
	// MaxAnnouncedAddrs is the most listen addresses one announcement may carry.
	MaxAnnouncedAddrs = 16
	// MinAnnounceInterval and MaxAnnounceInterval bound interval_ms.
	MinAnnounceInterval = 50 * time.Millisecond
	MaxAnnounceInterval = 10 * time.Minute
	// MissedAnnouncements is how many intervals an entry outlives its last
	// announcement.
	MissedAnnouncements = 3
)

// AttachID is the stream protocol an ordinary node attaches to a supernode
// with: AttachRequest, then AttachResponse, then (on ACCEPT) SessionFrames
// both ways until either side closes. See the package documentation.
const AttachID = "/overlayd/attach/1.0.0"

// Attach protocol timing.
const (
	// MissedKeepalives is how many keepalive intervals of silence end a
	// session, on either side.
	MissedKeepalives = 3
	// MaxAlternatives is the most alternatives a BUSY, REDIRECT or Detach
	// carries.
	MaxAlternatives = 4
)

// Messaging protocol IDs.
const (
	// RelayID is the supernode-to-supernode link: RelayFrames, one
	// long-lived stream per direction.
	RelayID = "/overlayd/relay/1.0.0"
	// LookupID is a request/response stream: LookupRequest, LookupResponse.
	LookupID = "/overlayd/lookup/1.0.0"
	// LocateID is a request/response stream from an attached client to
	// its supernode: LookupRequest{client}, then LookupResponse{found,
	// location, location_addrs}, the supernode the client is attached to
	// and that supernode's addresses. A client reaches a peer behind NAT
	// through that supernode's circuit relay. Refused (reset) for peers
	// not attached to the supernode.
	LocateID = "/overlayd/locate/1.0.0"
)

// Messaging limits.
const (
	// MaxPayload is the largest direct or group message payload, in bytes.
	MaxPayload = 64 << 10
	// MaxGroupName is the longest group name, in bytes.
	MaxGroupName = 256
	// MaxSessionFrame bounds SessionFrames after the handshake: a payload
	// plus its envelope.
	MaxSessionFrame = MaxPayload + 1024
	// MaxRelayFrame bounds RelayFrames; presence and membership batches
	// are split to fit.
	MaxRelayFrame = 256 << 10
	// MaxLookupFrame bounds LookupRequest and LookupResponse.
	MaxLookupFrame = 128 << 10
	// MaxLocateFrame bounds a locate request or answer: a peer ID, or a
	// peer ID and a few addresses.
	MaxLocateFrame = 4 << 10
	// MessageIDLen is the length of a message ID.
	MessageIDLen = 16
)

// NewMessageID returns a fresh random message ID of MessageIDLen bytes.
// IDs name a message end to end (acks, dedup, results), so they come from
// crypto/rand: a peer must not be able to predict another's next ID.
func NewMessageID() []byte {
	b := make([]byte, MessageIDLen)
	_, _ = rand.Read(b)
	return b
}
