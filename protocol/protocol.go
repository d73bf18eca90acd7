package protocol

import "time"

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
