package localapi

import (
	"time"

	"github.com/overlayd/overlayd/overlay/ring"
)

// Status describes the daemon.
type Status struct {
	PeerID string `json:"peer_id"`
	// Role is the role the node plays now; ConfiguredRole what it was
	// started with; RoleReason why they differ, or why the role holds.
	Role           string `json:"role"`
	ConfiguredRole string `json:"configured_role"`
	RoleReason     string `json:"role_reason,omitempty"`
	// RoleCriteria are the rules of --role auto as last evaluated (empty
	// for a pinned role): each with whether it holds and its value.
	RoleCriteria []RoleCriterion `json:"role_criteria,omitempty"`
	// RoleChangedAt is when a --role auto node last promoted or began
	// to demote itself.
	RoleChangedAt *time.Time `json:"role_changed_at,omitempty"`
	// Reachability is the node's public reachability: public, private
	// or unknown (AutoNAT, or pinned).
	Reachability   string    `json:"reachability"`
	Capacity       int       `json:"capacity"`
	Addrs          []string  `json:"addrs"`
	StartedAt      time.Time `json:"started_at"`
	UptimeSeconds  float64   `json:"uptime_seconds"`
	ConnectedPeers int       `json:"connected_peers"`
	DirectorySize  int       `json:"directory_size"`
	RingVersion    string    `json:"ring_version,omitempty"`
	Version        string    `json:"version"`
	// Attachment is an ordinary node's session (nil when detached or a
	// supernode); Semaphores a supernode's capacity semaphores.
	Attachment *Attachment `json:"attachment,omitempty"`
	Failovers  int         `json:"failovers"`
	Semaphores []Semaphore `json:"semaphores,omitempty"`
	// AttachedClients is a supernode's number of attached clients.
	AttachedClients int `json:"attached_clients"`
	// Mega is this node's certificate while it is a mega-supernode.
	Mega *MegaCert `json:"mega,omitempty"`
	// OfflineStore is a supernode's store of direct messages for offline
	// peers (nil on a node without one).
	OfflineStore *OfflineStore `json:"offline_store,omitempty"`
	// NoLoss is a supernode's group replay logs and its counts of group
	// resume, replication and offline messages since it started.
	NoLoss *NoLoss `json:"no_loss,omitempty"`
	// Relay is the reachability and circuit relay state (localapi/relay.go).
	Relay *Relay `json:"relay,omitempty"`
	// Refusals are every refusal this node counted since it started (its
	// *_refused_total and *_rejected_total series that are above zero):
	// what hostile or broken peers sent it and it did not act on.
	Refusals []Refusal `json:"refusals,omitempty"`
}

// Refusal is one refusal counter: the Prometheus series, without its
// overlayd_ prefix, with its labels, and its count.
type Refusal struct {
	Metric string `json:"metric"`
	Labels string `json:"labels,omitempty"` // k=v,k=v
	Count  uint64 `json:"count"`
}

// RoleCriterion is one rule of --role auto: whether it holds now, and the
// figures it was decided on.
type RoleCriterion struct {
	Name   string `json:"name"`
	Held   bool   `json:"held"`
	Detail string `json:"detail"`
}

// MegaCert describes a mega-supernode certificate.
type MegaCert struct {
	Serial    uint64    `json:"serial"`
	Capacity  uint32    `json:"capacity"`
	NotBefore time.Time `json:"not_before"`
	NotAfter  time.Time `json:"not_after"`
}

// CertRequest carries a certificate or revocation in its text form
// (protocol.EncodeBlob).
type CertRequest struct {
	Blob string `json:"blob"`
}

// Attachment is an ordinary node's current session.
type Attachment struct {
	Supernode string    `json:"supernode"`
	Since     time.Time `json:"since"`
	Home      bool      `json:"home"`
}

// Semaphore is one capacity semaphore's state.
type Semaphore struct {
	Name     string `json:"name"`
	InUse    int    `json:"in_use"`
	Max      int    `json:"max"`
	Acquired uint64 `json:"acquired"`
	Refused  uint64 `json:"refused"`
}

// Peer is one connected peer.
type Peer struct {
	ID        string   `json:"id"`
	Addrs     []string `json:"addrs"`
	Direction string   `json:"direction"`
	Supernode bool     `json:"supernode"`
	// Attached is set on a supernode for its attached clients, with the
	// time the session began.
	Attached      bool       `json:"attached"`
	AttachedSince *time.Time `json:"attached_since,omitempty"`
}

// Supernode is one directory entry as this node sees it.
type Supernode struct {
	ID       string `json:"id"`
	Role     string `json:"role"`
	Capacity uint32 `json:"capacity"`
	Load     uint32 `json:"load"`
	// Spare is Capacity - Load (negative while a supernode carries more
	// than its capacity, as a demoted mega-supernode does briefly).
	Spare    int64     `json:"spare"`
	Addrs    []string  `json:"addrs"`
	Seq      uint64    `json:"seq"`
	LastSeen time.Time `json:"last_seen"`
	Expires  time.Time `json:"expires"`
	Self     bool      `json:"self,omitempty"`
	// MegaUntil is when a mega-supernode's certificate ends.
	MegaUntil *time.Time `json:"mega_until,omitempty"`
}

// Ring describes the live cluster ring: its balance statistics, or
// Members == 0 while the directory has no supernode.
type Ring struct {
	ring.Stats
}

// SendRequest is the body of POST /v1/send and of a group publish: the
// payload is Text (UTF-8) or Payload (bytes, base64 in JSON).
type SendRequest struct {
	To      string `json:"to,omitempty"`
	Text    string `json:"text,omitempty"`
	Payload []byte `json:"payload,omitempty"`
}

// Outcomes of a direct message that succeeded (SendResponse.Status).
const (
	// SendDelivered: the recipient acked it.
	SendDelivered = "delivered"
	// SendStored: the recipient is offline; a majority of its home
	// cluster stored the message and delivers it when it attaches.
	SendStored = "stored"
)

// OfflineStore is a supernode's offline message store: the messages it
// holds for offline peers as a member of their home clusters, how many
// peers they are for, and the store's bytes and bound (--store-max-bytes).
type OfflineStore struct {
	Messages   int   `json:"messages"`
	Recipients int   `json:"recipients"`
	Bytes      int64 `json:"bytes"`
	MaxBytes   int64 `json:"max_bytes"`
}

// NoLoss is what a supernode did so that messages survive failures: its
// group replay logs (groups, messages, bytes), the group resumes it served
// as a home (done, of which with a gap: the log no longer held all that was
// asked), the frames replayed, the replicas it holds for other homes, the
// publishes not replicated in time (their publishers retried), and the
// offline direct messages it stored, forwarded when their recipient
// attached, deleted on the recipient's ack, expired and refused.
type NoLoss struct {
	ReplayGroups        int    `json:"replay_groups"`
	ReplayMessages      int    `json:"replay_messages"`
	ReplayBytes         int64  `json:"replay_bytes"`
	ResumesDone         uint64 `json:"resumes_done"`
	ResumesWithGap      uint64 `json:"resumes_with_gap"`
	FramesReplayed      uint64 `json:"frames_replayed"`
	ReplicasHeld        uint64 `json:"replicas_held"`
	ReplicationTimeouts uint64 `json:"replication_timeouts"`
	OfflineStored       uint64 `json:"offline_stored"`
	OfflineForwarded    uint64 `json:"offline_forwarded"`
	OfflineAcked        uint64 `json:"offline_acked"`
	OfflineExpired      uint64 `json:"offline_expired"`
	OfflineRefused      uint64 `json:"offline_refused"`
}

// SendResponse reports a direct message delivered or stored.
type SendResponse struct {
	ID string `json:"id"`
	// Status is SendDelivered or SendStored.
	Status string `json:"status"`
	// Stored is Status == SendStored.
	Stored bool `json:"stored"`
	// Detail says how long a stored message is kept ("kept up to 168h0m0s").
	Detail string `json:"detail,omitempty"`
}

// PublishResponse reports a group publish: the home's epoch and sequence.
type PublishResponse struct {
	ID    string `json:"id"`
	Group string `json:"group"`
	Epoch uint64 `json:"epoch"`
	Seq   uint64 `json:"seq"`
}

// GroupMembers lists a group's members, as its home knows them.
type GroupMembers struct {
	Group   string   `json:"group"`
	Members []string `json:"members"`
}

// RevokeResponse is the answer to POST /v1/revoke: the serial of the
// certificate the revocation names.
type RevokeResponse struct {
	Serial uint64 `json:"serial"`
}

// Inbound is one message delivered to the node, as GET /v1/listen streams
// it: one JSON object per line. Every field but Kind and Time is left out
// of the JSON when empty.
type Inbound struct {
	// Kind is "direct" (a message to this node), "group" (a message to a
	// group it joined) or "gap" (Dropped messages were lost: this
	// listener read too slowly, or the node read its supernode session
	// too slowly).
	Kind string `json:"kind"`
	// From is the sender's peer ID.
	From string `json:"from,omitempty"`
	// Group, Epoch and Seq are set for a group message: the group, and
	// the place its home gave the message in the group's sequence.
	Group string `json:"group,omitempty"`
	Epoch uint64 `json:"epoch,omitempty"`
	Seq   uint64 `json:"seq,omitempty"`
	// ID is the message ID, in hex.
	ID string `json:"id,omitempty"`
	// Payload is the message (base64 in JSON); Text is the same payload
	// when it is printable UTF-8 (no control characters but newline and
	// tab), else empty.
	Payload []byte `json:"payload,omitempty"`
	Text    string `json:"text,omitempty"`
	// Dropped is, for a gap, how many messages were lost.
	Dropped uint64 `json:"dropped,omitempty"`
	// Sent is when the sender says it sent a direct message (it signed
	// this, but by its own clock); absent for other kinds.
	Sent time.Time `json:"sent,omitzero"`
	// Time is when the node received the message.
	Time time.Time `json:"time"`
}
