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
