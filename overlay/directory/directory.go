package directory

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/protocol"
)

// DefaultMaxEntries bounds the peers a Directory remembers (live entries
// plus recently departed ones whose sequence numbers it keeps).
const DefaultMaxEntries = 1 << 16

// Entry is one live supernode.
type Entry struct {
	protocol.Announcement
	// FirstSeen is when the entry was added; LastSeen when its latest
	// announcement was accepted.
	FirstSeen, LastSeen time.Time
	// Expires is LastSeen + MissedAnnouncements × the announced interval,
	// and for a mega-supernode no later than its certificate's expiry.
	Expires time.Time
	// Cert is the verified certificate of a mega-supernode (nil otherwise).
	Cert *protocol.MegaCert
	// SupernodeCert is the verified certificate of a regular supernode in a
	// certified network (nil otherwise); Capacity is at most its ceiling.
	SupernodeCert *protocol.SupernodeCert
}

// Snapshot is an immutable view of the directory. Entries are sorted by peer
// ID. Callers must not modify it.
type Snapshot struct {
	// Version increases on every change, load updates included.
	Version uint64
	// Membership increases only when the set of (peer, role, capacity)
	// changes: what the ring is built from.
	Membership uint64
	Entries    []Entry
}

// Len returns the number of live entries.
func (s *Snapshot) Len() int { return len(s.Entries) }

// Get returns the entry for id.
func (s *Snapshot) Get(id peer.ID) (Entry, bool) {
	i, ok := slices.BinarySearchFunc(s.Entries, id, func(e Entry, id peer.ID) int {
		return strings.Compare(string(e.ID), string(id))
	})
	if !ok {
		return Entry{}, false
	}
	return s.Entries[i], true
}

// EventKind says what an accepted announcement or an expiry did.
type EventKind int

// Event kinds.
const (
	Added EventKind = iota + 1
	Updated
	Departed
	Expired
)

func (k EventKind) String() string {
	switch k {
	case Added:
		return "added"
	case Updated:
		return "updated"
	case Departed:
		return "departed"
	case Expired:
		return "expired"
	}
	return "unknown"
}

// Event reports one change.
type Event struct {
	Kind EventKind
	ID   peer.ID
}

type seqMark struct {
	seq uint64
	// forget is when the mark may be dropped: long after any copy of an
	// older announcement could still be in flight.
	forget time.Time
}

// MegaVerifier checks an announcement's certificate at now. It is called
// for every announcement that is not departing, whatever its role. For
// RoleMega the result is the entry's Cert. For RoleSupernode a result with
// a serial (verified certificates have one) is the entry's SupernodeCert,
// and its Capacity the ceiling of the entry's capacity; a zero result
// admits the supernode without a certificate (an open network). Errors
// should be *protocol.RejectError; the announcement is refused.
type MegaVerifier func(a protocol.Announcement, now time.Time) (protocol.MegaCert, error)

// Directory is safe for concurrent use.
type Directory struct {
	maxEntries int
	verifyMega MegaVerifier

	mu         sync.Mutex
	entries    map[peer.ID]Entry
	seqs       map[peer.ID]seqMark
	version    uint64
	membership uint64
	subs       map[chan struct{}]struct{}

	snap  atomic.Pointer[Snapshot]
	dirty atomic.Bool
}

// Option configures a Directory.
type Option func(*Directory)

// WithMaxEntries bounds the peers remembered; n < 1 means the default.
func WithMaxEntries(n int) Option {
	return func(d *Directory) {
		if n >= 1 {
			d.maxEntries = n
		}
	}
}

// WithMegaVerifier sets how certificates are checked (see MegaVerifier).
// Without one, every RoleMega announcement is refused (cert_untrusted_key):
// a node that trusts no operator key trusts no mega-supernode; and
// supernodes are admitted without a certificate.
func WithMegaVerifier(v MegaVerifier) Option {
	return func(d *Directory) { d.verifyMega = v }
}

// New returns an empty Directory.
func New(opts ...Option) *Directory {
	d := &Directory{
		maxEntries: DefaultMaxEntries,
		entries:    make(map[peer.ID]Entry),
		seqs:       make(map[peer.ID]seqMark),
		subs:       make(map[chan struct{}]struct{}),
	}
	for _, o := range opts {
		o(d)
	}
	d.snap.Store(&Snapshot{})
	return d
}

// Receive decodes an announcement carried in a message signed by signer and
// applies it. Errors are *protocol.RejectError.
func (d *Directory) Receive(signer peer.ID, data []byte, now time.Time) (Event, error) {
	a, err := protocol.UnmarshalAnnouncement(data)
	if err != nil {
		return Event{}, err
	}
	return d.Apply(signer, a, now)
}

// Apply checks a decoded announcement against the signer and the last
// sequence number seen from its peer, and records it. Errors are
// *protocol.RejectError.
func (d *Directory) Apply(signer peer.ID, a protocol.Announcement, now time.Time) (Event, error) {
	if signer != a.ID {
		return Event{}, protocol.Reject(protocol.ReasonSignerMismatch, "announcement for %s signed by %s", a.ID, signer)
	}
	var cert, snCert *protocol.MegaCert
	if a.Role == protocol.RoleMega && !a.Departing {
		if d.verifyMega == nil {
			return Event{}, protocol.Reject(protocol.CertUntrusted, "mega announcement from %s, and no operator key is trusted", a.ID)
		}
		c, err := d.verifyMega(a, now)
		if err != nil {
			return Event{}, err
		}
		cert = &c
	} else if !a.Departing && d.verifyMega != nil {
		c, err := d.verifyMega(a, now)
		if err != nil {
			return Event{}, err
		}
		if c.Serial != 0 {
			snCert = &c
			a.Capacity = min(a.Capacity, c.Capacity)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	mark, known := d.seqs[a.ID]
	if known && a.Seq <= mark.seq {
		return Event{}, protocol.Reject(protocol.ReasonStaleSeq, "announcement seq %d from %s, already have %d", a.Seq, a.ID, mark.seq)
	}
	if !known && len(d.seqs) >= d.maxEntries {
		d.forgetLocked(now)
		if len(d.seqs) >= d.maxEntries {
			return Event{}, protocol.Reject(protocol.ReasonDirectoryFull, "directory holds %d peers", len(d.seqs))
		}
	}
	ttl := protocol.MissedAnnouncements * a.Interval
	// Keep the sequence mark twice as long as the entry would live, so a
	// delayed copy of an older announcement cannot resurrect a departed peer.
	d.seqs[a.ID] = seqMark{seq: a.Seq, forget: now.Add(2 * ttl)}

	old, live := d.entries[a.ID]
	if a.Departing {
		if !live {
			return Event{Kind: Departed, ID: a.ID}, nil
		}
		delete(d.entries, a.ID)
		d.changedLocked(true)
		return Event{Kind: Departed, ID: a.ID}, nil
	}
	e := Entry{Announcement: a, FirstSeen: now, LastSeen: now, Expires: now.Add(ttl), Cert: cert, SupernodeCert: snCert}
	for _, c := range []*protocol.MegaCert{cert, snCert} {
		if c == nil {
			continue
		}
		if end := c.NotAfter.Add(protocol.ClockSkew); end.Before(e.Expires) {
			e.Expires = end
		}
	}
	kind := Added
	if live {
		e.FirstSeen = old.FirstSeen
		kind = Updated
	}
	d.entries[a.ID] = e
	d.changedLocked(!live || old.Role != a.Role || old.Capacity != a.Capacity)
	return Event{Kind: kind, ID: a.ID}, nil
}

// Expire removes entries whose announcements stopped, and returns them.
func (d *Directory) Expire(now time.Time) []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	var evs []Event
	for id, e := range d.entries {
		if !now.Before(e.Expires) {
			delete(d.entries, id)
			evs = append(evs, Event{Kind: Expired, ID: id})
		}
	}
	d.forgetLocked(now)
	if len(evs) > 0 {
		d.changedLocked(true)
	}
	return evs
}

// Revoke removes the mega-supernode or supernode whose certificate has
// serial, and returns it (if any). Its later announcements are refused by
// the verifier.
func (d *Directory) Revoke(serial uint64) []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	var evs []Event
	for id, e := range d.entries {
		if (e.Cert != nil && e.Cert.Serial == serial) || (e.SupernodeCert != nil && e.SupernodeCert.Serial == serial) {
			delete(d.entries, id)
			evs = append(evs, Event{Kind: Expired, ID: id})
		}
	}
	if len(evs) > 0 {
		d.changedLocked(true)
	}
	return evs
}

// forgetLocked drops sequence marks of peers that are gone and whose marks
// have outlived any copy of their announcements.
func (d *Directory) forgetLocked(now time.Time) {
	for id, m := range d.seqs {
		if _, live := d.entries[id]; !live && !now.Before(m.forget) {
			delete(d.seqs, id)
		}
	}
}

func (d *Directory) changedLocked(membership bool) {
	d.version++
	if membership {
		d.membership++
	}
	d.dirty.Store(true)
	for ch := range d.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Snapshot returns the current view. It does not lock unless the directory
// changed since the last call.
func (d *Directory) Snapshot() *Snapshot {
	if !d.dirty.Load() {
		return d.snap.Load()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.dirty.Load() {
		return d.snap.Load()
	}
	s := &Snapshot{Version: d.version, Membership: d.membership, Entries: make([]Entry, 0, len(d.entries))}
	for _, e := range d.entries {
		s.Entries = append(s.Entries, e)
	}
	slices.SortFunc(s.Entries, func(a, b Entry) int { return strings.Compare(string(a.ID), string(b.ID)) })
	d.snap.Store(s)
	d.dirty.Store(false)
	return s
}

// Subscribe returns a channel that receives a value after changes (several
// changes may be coalesced into one value) and a function that unsubscribes.
func (d *Directory) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	d.mu.Lock()
	d.subs[ch] = struct{}{}
	d.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			d.mu.Lock()
			delete(d.subs, ch)
			d.mu.Unlock()
		})
	}
}
