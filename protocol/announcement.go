package protocol

import (
	"fmt"
	"math"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/protocol/pb"
)

// Role is the tier a supernode announces.
type Role int

// Roles carried in announcements.
const (
	RoleSupernode Role = Role(pb.Role_ROLE_SUPERNODE)
	RoleMega      Role = Role(pb.Role_ROLE_MEGA)
)

// String returns "supernode", "mega" or "unknown(N)".
func (r Role) String() string {
	switch r {
	case RoleSupernode:
		return "supernode"
	case RoleMega:
		return "mega"
	}
	return fmt.Sprintf("unknown(%d)", int(r))
}

// Announcement is the decoded, validated form of pb.Announcement.
type Announcement struct {
	ID        peer.ID
	Addrs     []ma.Multiaddr
	Role      Role
	Capacity  uint32
	Load      uint32
	Version   uint32
	Seq       uint64
	Interval  time.Duration
	Departing bool
	// MegaCert is the operator certificate a RoleMega announcement
	// carries (verified by the receiver, not here).
	MegaCert []byte
	// Issued is when the announcer built it (millisecond precision); the
	// zero time when the announcer did not say (a peer of an earlier
	// build), which receivers accept unchecked.
	Issued time.Time
}

// MaxIntervalFactor bounds, for expiry, the interval a receiver believes:
// an announced interval counts as at most MaxIntervalFactor times the
// receiver's own announce interval (ClampInterval). An announcer may claim
// up to MaxAnnounceInterval (10 min, so 30 min of life); without the clamp
// the entries of an attacker who left would outlive it by that long.
const MaxIntervalFactor = 2

// ClampInterval returns the interval a receiver whose own announce interval
// is local applies to an announcement that claims announced: announced
// within [MinAnnounceInterval, MaxIntervalFactor × local]. local <= 0 means
// no receiver bound (announced is returned within the protocol's range).
func ClampInterval(announced, local time.Duration) time.Duration {
	hi := MaxAnnounceInterval
	if local > 0 {
		hi = min(hi, max(MaxIntervalFactor*local, MinAnnounceInterval))
	}
	return min(max(announced, MinAnnounceInterval), hi)
}

// Validity is how long after it was issued an announcement with (clamped)
// interval iv may still be acted on: MissedAnnouncements intervals, the
// lifetime of the entry it refreshes.
func Validity(iv time.Duration) time.Duration { return MissedAnnouncements * iv }

// CheckFresh refuses an announcement whose Issued time is more than
// ClockSkew ahead of now [ReasonFuture], or whose validity for the clamped
// interval iv ended more than ClockSkew before now [ReasonExpired]. An
// announcement without Issued passes. Errors are *RejectError.
func (a *Announcement) CheckFresh(now time.Time, iv time.Duration) error {
	if a.Issued.IsZero() {
		return nil
	}
	if a.Issued.After(now.Add(ClockSkew)) {
		return Reject(ReasonFuture, "announcement issued %v ahead of this clock (skew allowance %v)", a.Issued.Sub(now), ClockSkew)
	}
	if end := a.Issued.Add(Validity(iv) + ClockSkew); !now.Before(end) {
		return Reject(ReasonExpired, "announcement issued %v ago, valid for %v (+%v skew)", now.Sub(a.Issued), Validity(iv), ClockSkew)
	}
	return nil
}

// Marshal validates a and encodes it.
func (a *Announcement) Marshal() ([]byte, error) {
	m := &pb.Announcement{
		PeerId:          []byte(a.ID),
		Role:            pb.Role(a.Role),
		Capacity:        a.Capacity,
		Load:            a.Load,
		ProtocolVersion: a.Version,
		Seq:             a.Seq,
		IntervalMs:      uint32(a.Interval / time.Millisecond),
		Departing:       a.Departing,
		MegaCert:        a.MegaCert,
	}
	if !a.Issued.IsZero() {
		m.IssuedUnixMs = uint64(max(a.Issued.UnixMilli(), 1))
	}
	for _, addr := range a.Addrs {
		m.Addrs = append(m.Addrs, addr.Bytes())
	}
	if _, err := fromPB(m); err != nil {
		return nil, fmt.Errorf("marshal announcement: %w", err)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal announcement: %w", err)
	}
	if len(b) > MaxAnnouncementSize {
		return nil, fmt.Errorf("marshal announcement: %w",
			Reject(ReasonOversize, "%d bytes, limit %d", len(b), MaxAnnouncementSize))
	}
	return b, nil
}

// UnmarshalAnnouncement decodes and validates an announcement. It checks
// everything that needs no outside state: size, encoding and field values.
// The signer and sequence checks are the directory's. Errors are
// *RejectError.
func UnmarshalAnnouncement(b []byte) (Announcement, error) {
	if len(b) > MaxAnnouncementSize {
		return Announcement{}, Reject(ReasonOversize, "announcement of %d bytes, limit %d", len(b), MaxAnnouncementSize)
	}
	var m pb.Announcement
	if err := proto.Unmarshal(b, &m); err != nil {
		return Announcement{}, Reject(ReasonUndecodable, "announcement: %v", err)
	}
	return fromPB(&m)
}

func fromPB(m *pb.Announcement) (Announcement, error) {
	id, err := peer.IDFromBytes(m.GetPeerId())
	if err != nil {
		return Announcement{}, Reject(ReasonInvalid, "announcement peer_id: %v", err)
	}
	a := Announcement{
		ID:        id,
		Role:      Role(m.GetRole()),
		Capacity:  m.GetCapacity(),
		Load:      m.GetLoad(),
		Version:   m.GetProtocolVersion(),
		Seq:       m.GetSeq(),
		Interval:  time.Duration(m.GetIntervalMs()) * time.Millisecond,
		Departing: m.GetDeparting(),
		MegaCert:  m.GetMegaCert(),
	}
	if ms := m.GetIssuedUnixMs(); ms != 0 {
		if ms > uint64(math.MaxInt64/int64(time.Millisecond)) {
			return Announcement{}, Reject(ReasonInvalid, "announcement issued_unix_ms %d out of range", ms)
		}
		a.Issued = time.UnixMilli(int64(ms))
	}
	switch {
	case a.Role != RoleSupernode && a.Role != RoleMega:
		return Announcement{}, Reject(ReasonInvalid, "announcement role %d", int(m.GetRole()))
	case a.Capacity == 0:
		return Announcement{}, Reject(ReasonInvalid, "announcement capacity 0")
	case len(m.GetAddrs()) == 0:
		return Announcement{}, Reject(ReasonInvalid, "announcement has no addresses")
	case len(m.GetAddrs()) > MaxAnnouncedAddrs:
		return Announcement{}, Reject(ReasonInvalid, "announcement has %d addresses, limit %d", len(m.GetAddrs()), MaxAnnouncedAddrs)
	case a.Interval < MinAnnounceInterval || a.Interval > MaxAnnounceInterval:
		return Announcement{}, Reject(ReasonInvalid, "announcement interval %v outside [%v, %v]", a.Interval, MinAnnounceInterval, MaxAnnounceInterval)
	case a.Seq == 0:
		return Announcement{}, Reject(ReasonInvalid, "announcement seq 0")
	case a.Role == RoleMega && len(a.MegaCert) == 0:
		return Announcement{}, Reject(ReasonInvalid, "mega announcement without a certificate")
	case len(a.MegaCert) > MaxCertSize:
		return Announcement{}, Reject(ReasonInvalid, "certificate of %d bytes, limit %d", len(a.MegaCert), MaxCertSize)
	}
	a.Addrs = make([]ma.Multiaddr, 0, len(m.GetAddrs()))
	for i, raw := range m.GetAddrs() {
		addr, err := ma.NewMultiaddrBytes(raw)
		if err != nil {
			return Announcement{}, Reject(ReasonInvalid, "announcement address %d: %v", i, err)
		}
		a.Addrs = append(a.Addrs, addr)
	}
	return a, nil
}

// AnnounceBudget is how many announcements a second the supernode tier may
// make in all, so that what each supernode receives stays bounded however
// many supernodes there are (AnnounceInterval).
const AnnounceBudget = 100

// AnnounceInterval is the interval a supernode announces at when its
// directory holds supernodes entries: the configured base, stretched so
// that all of them together make about AnnounceBudget announcements a
// second (supernodes / AnnounceBudget seconds; the schedule's jitter of up
// to 10% adds about 5%), and at most MaxAnnounceInterval. Every supernode
// computes it from its own directory, so they agree within the spread of
// their directories' sizes; receivers clamp an announced interval to
// MaxIntervalFactor times their own (ClampInterval), which covers that
// spread. At 10 s it changes nothing below 1,000 supernodes; from 60,000
// the cap binds (at 100,000: 167 a second, 175 with the jitter).
func AnnounceInterval(base time.Duration, supernodes int) time.Duration {
	stretched := time.Duration(supernodes) * time.Second / AnnounceBudget
	return min(max(base, stretched), max(base, MaxAnnounceInterval))
}
