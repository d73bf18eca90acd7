package supernode

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/protocol"
)

// Announcer builds this supernode's directory announcements. It owns the
// sequence numbers: each announcement's seq is larger than the previous one
// and at least the wall-clock time in nanoseconds, so a restarted supernode
// is not mistaken for a replay of its earlier self. Safe for concurrent use.
type Announcer struct {
	id peer.ID

	mu       sync.Mutex
	interval time.Duration
	seq      uint64
	role     protocol.Role
	capacity uint32
	cert     []byte
}

// NewAnnouncer returns an Announcer for id announcing every interval.
func NewAnnouncer(id peer.ID, role protocol.Role, capacity int, interval time.Duration) (*Announcer, error) {
	if id == "" {
		return nil, errors.New("announcer: empty peer ID")
	}
	if interval < protocol.MinAnnounceInterval || interval > protocol.MaxAnnounceInterval {
		return nil, fmt.Errorf("announcer: interval %v outside [%v, %v]", interval, protocol.MinAnnounceInterval, protocol.MaxAnnounceInterval)
	}
	a := &Announcer{id: id, interval: interval}
	if err := a.SetRole(role, capacity); err != nil {
		return nil, err
	}
	return a, nil
}

// SetRole changes the role and capacity of later announcements.
func (a *Announcer) SetRole(role protocol.Role, capacity int) error {
	if role != protocol.RoleSupernode && role != protocol.RoleMega {
		return fmt.Errorf("announcer: role %v", role)
	}
	if capacity < 1 || capacity > 1<<31 {
		return fmt.Errorf("announcer: capacity %d outside [1, 2^31]", capacity)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.role, a.capacity = role, uint32(capacity)
	return nil
}

// SetCert sets the certificate carried by later announcements: a
// mega-supernode's, or a supernode's in a certified network (nil for none).
func (a *Announcer) SetCert(cert []byte) {
	a.mu.Lock()
	a.cert = cert
	a.mu.Unlock()
}

// Interval returns the announce interval.
func (a *Announcer) Interval() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.interval
}

// SetInterval changes the interval later announcements carry (the tier
// grew or shrank: protocol.AnnounceInterval).
func (a *Announcer) SetInterval(interval time.Duration) error {
	if interval < protocol.MinAnnounceInterval || interval > protocol.MaxAnnounceInterval {
		return fmt.Errorf("announcer: interval %v outside [%v, %v]", interval, protocol.MinAnnounceInterval, protocol.MaxAnnounceInterval)
	}
	a.mu.Lock()
	a.interval = interval
	a.mu.Unlock()
	return nil
}

// Next encodes the next announcement. departing marks the last one.
func (a *Announcer) Next(addrs []ma.Multiaddr, load int, departing bool, now time.Time) ([]byte, error) {
	if len(addrs) > protocol.MaxAnnouncedAddrs {
		addrs = addrs[:protocol.MaxAnnouncedAddrs]
	}
	a.mu.Lock()
	seq := max(a.seq+1, uint64(max(now.UnixNano(), 1)))
	a.seq = seq
	role, capacity, cert, interval := a.role, a.capacity, a.cert, a.interval
	a.mu.Unlock()
	ann := protocol.Announcement{
		ID:        a.id,
		Addrs:     addrs,
		Role:      role,
		Capacity:  capacity,
		Load:      uint32(max(load, 0)),
		Version:   protocol.Version,
		Seq:       seq,
		Interval:  interval,
		Departing: departing,
		MegaCert:  cert,
		Issued:    now,
	}
	return ann.Marshal()
}
