package directory

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

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
	// RampFrom is when the entry's ring weight starts ramping up
	// (overlay/cluster): FirstSeen, or the zero time for an entry this
	// directory already held during its warm-up (Limits.Warmup after its
	// first announcement), which it cannot tell from an established one.
	RampFrom time.Time
	// Signed is the GossipSub message that carried the announcement, as
	// its supernode signed it (protocol.OpenSigned opens it): what a
	// supernode serves in partial views (overlay/view). Nil when the entry
	// came without one (Apply), or it was larger than
	// protocol.MaxSignedAnnouncement.
	Signed []byte
}

// Snapshot is an immutable view of the directory. Entries are sorted by peer
// ID. Callers must not modify it.
type Snapshot struct {
	// Version increases on every change, load updates included.
	Version uint64
	// Membership increases only when the set of (peer, role, capacity,
	// addresses) changes: what the ring is built from (with the time, for
	// the weight ramp).
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

// Limits are the receiver-side bounds that depend on the node's own
// configuration. The zero value bounds nothing (no interval clamp, no rate
// limit, no warm-up).
type Limits struct {
	// Interval is the receiver's own announce interval. Announced
	// intervals count as at most protocol.MaxIntervalFactor times it for
	// expiry (protocol.ClampInterval), and the rate limits are per
	// Interval.
	Interval time.Duration
	// PerSigner is the most announcements one signer may have accepted per
	// Interval (a token bucket of that size, refilled over an Interval).
	// An honest announcer sends one, plus one at a role change and one
	// when it departs.
	PerSigner int
	// PerForwarder is the least number of announcements one forwarding
	// peer may pass per Interval; the bucket is sized
	// max(PerForwarder, 2 × live entries) so a hub that relays every
	// supernode's announcement to a leaf stays within it.
	PerForwarder int
	// Warmup: entries first seen within Warmup of the directory's first
	// accepted announcement are treated as established (RampFrom zero): a
	// node that just started cannot tell a new supernode from an old one.
	Warmup time.Duration
}

// DefaultLimits returns the limits for a node announcing every interval:
// PerSigner 4, PerForwarder 64, Warmup protocol.MissedAnnouncements
// intervals (every live supernode has announced by then).
func DefaultLimits(interval time.Duration) Limits {
	return Limits{Interval: interval, PerSigner: 4, PerForwarder: 64, Warmup: protocol.MissedAnnouncements * interval}
}

// bucket is a token bucket refilled at size per interval.
type bucket struct {
	tokens float64
	last   time.Time
}

// take refills b for the time since its last use and takes one token.
func (b *bucket) take(size float64, interval time.Duration, now time.Time) bool {
	if b.last.IsZero() {
		b.tokens = size
	} else if dt := now.Sub(b.last); dt > 0 {
		b.tokens = min(size, b.tokens+size*float64(dt)/float64(interval))
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// idle reports whether b would be full at now (it can be forgotten).
func (b *bucket) idle(size float64, interval time.Duration, now time.Time) bool {
	return b.tokens+size*float64(now.Sub(b.last))/float64(interval) >= size
}

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
	limits     Limits
	started    time.Time // first accepted announcement
	signers    map[peer.ID]*bucket
	forwarders map[peer.ID]*bucket

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
		signers:    make(map[peer.ID]*bucket),
		forwarders: make(map[peer.ID]*bucket),
	}
	for _, o := range opts {
		o(d)
	}
	d.snap.Store(&Snapshot{})
	return d
}

// SetLimits sets the receiver-side limits: the node sets them from its
// Config when it starts the directory topic, and again when the tier's
// announce interval changes with its size (protocol.AnnounceInterval).
func (d *Directory) SetLimits(l Limits) {
	d.mu.Lock()
	d.limits = l
	d.mu.Unlock()
}

// Admit charges one announcement signed by signer and forwarded by from
// against their rate limits, before anything is decoded. It returns a
// *protocol.RejectError of reason rate_limited when either bucket is empty.
// Pass from == "" for a message of this node's own. The buckets are
// bounded: at most 2 × the maximum entries of each, idle ones forgotten
// first; when the table is still full, the message is refused.
func (d *Directory) Admit(from, signer peer.ID, now time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := d.limits
	if l.Interval <= 0 {
		return nil
	}
	if l.PerSigner > 0 && !d.takeLocked(d.signers, signer, float64(l.PerSigner), now) {
		return protocol.Reject(protocol.ReasonRateLimited, "signer %s sent more than %d announcements per %v", signer, l.PerSigner, l.Interval)
	}
	if size := float64(max(l.PerForwarder, 2*len(d.entries))); from != "" && l.PerForwarder > 0 && !d.takeLocked(d.forwarders, from, size, now) {
		return protocol.Reject(protocol.ReasonRateLimited, "peer %s forwarded more than %.0f announcements per %v", from, size, l.Interval)
	}
	return nil
}

func (d *Directory) takeLocked(m map[peer.ID]*bucket, id peer.ID, size float64, now time.Time) bool {
	b, ok := m[id]
	if !ok {
		if len(m) >= 2*d.maxEntries {
			for k, v := range m {
				if v.idle(size, d.limits.Interval, now) {
					delete(m, k)
				}
			}
			if len(m) >= 2*d.maxEntries {
				return false
			}
		}
		b = &bucket{}
		m[id] = b
	}
	return b.take(size, d.limits.Interval, now)
}

// Receive decodes an announcement carried in a message signed by signer and
// applies it. signed is that message as its signer signed it (kept as the
// entry's Signed), or nil. Errors are *protocol.RejectError.
func (d *Directory) Receive(signer peer.ID, data, signed []byte, now time.Time) (Event, error) {
	a, err := protocol.UnmarshalAnnouncement(data)
	if err != nil {
		return Event{}, err
	}
	return d.apply(signer, a, signed, now)
}

// ReceiveSigned opens a signed directory message (protocol.OpenSigned: a
// view entry) and applies its announcement as Receive does. Errors are
// *protocol.RejectError.
func (d *Directory) ReceiveSigned(signed []byte, now time.Time) (Event, error) {
	signer, data, err := protocol.OpenSigned(signed)
	if err != nil {
		return Event{}, err
	}
	return d.Receive(signer, data, signed, now)
}

// Apply checks a decoded announcement against the signer and the last
// sequence number seen from its peer, and records it. Errors are
// *protocol.RejectError.
func (d *Directory) Apply(signer peer.ID, a protocol.Announcement, now time.Time) (Event, error) {
	return d.apply(signer, a, nil, now)
}

func (d *Directory) apply(signer peer.ID, a protocol.Announcement, signed []byte, now time.Time) (Event, error) {
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
	iv := protocol.ClampInterval(a.Interval, d.limits.Interval)
	if err := a.CheckFresh(now, iv); err != nil {
		return Event{}, err
	}
	mark, known := d.seqs[a.ID]
	_, held := d.entries[a.ID]
	// The same seq again is stale while the entry is live; after Retain
	// dropped it (a partial view that no longer named it) the same
	// announcement may come back in a later view, and is taken again.
	if known && (a.Seq < mark.seq || a.Seq == mark.seq && held) {
		return Event{}, protocol.Reject(protocol.ReasonStaleSeq, "announcement seq %d from %s, already have %d", a.Seq, a.ID, mark.seq)
	}
	if !known && len(d.seqs) >= d.maxEntries {
		d.forgetLocked(now)
		if len(d.seqs) >= d.maxEntries {
			return Event{}, protocol.Reject(protocol.ReasonDirectoryFull, "directory holds %d peers", len(d.seqs))
		}
	}
	ttl := protocol.Validity(iv)
	// An entry lives ttl from when its announcement was issued (if that
	// is earlier than now), so a copy delayed on the way buys no time.
	from := now
	if !a.Issued.IsZero() && a.Issued.Before(now) {
		from = a.Issued
	}
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
	if d.started.IsZero() {
		d.started = now
	}
	e := Entry{Announcement: a, FirstSeen: now, LastSeen: now, Expires: from.Add(ttl), Cert: cert, SupernodeCert: snCert, RampFrom: now}
	if len(signed) <= protocol.MaxSignedAnnouncement {
		e.Signed = signed
	}
	if now.Before(d.started.Add(d.limits.Warmup)) {
		e.RampFrom = time.Time{}
	}
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
		e.FirstSeen, e.RampFrom = old.FirstSeen, old.RampFrom
		kind = Updated
	}
	d.entries[a.ID] = e
	d.changedLocked(!live || old.Role != a.Role || old.Capacity != a.Capacity || !sameAddrs(old.Addrs, a.Addrs))
	return Event{Kind: kind, ID: a.ID}, nil
}

// sameAddrs reports whether two address lists are equal, in order: the
// first public address decides a ring member's subnet (overlay/cluster).
func sameAddrs(a, b []ma.Multiaddr) bool {
	return slices.EqualFunc(a, b, func(x, y ma.Multiaddr) bool { return x.Equal(y) })
}

// Verified reports whether the directory accepted an announcement of id
// with a seq of at least seq: it holds a regular supernode's entry for id,
// or remembers accepting one that has expired or been retained out since
// (its sequence mark). A partial view's members are believed only so
// (overlay/view.Members).
func (d *Directory) Verified(id peer.ID, seq uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.entries[id]; ok {
		return e.Role == protocol.RoleSupernode
	}
	m, ok := d.seqs[id]
	return ok && m.seq >= seq
}

// Retain removes every live entry whose peer keep does not hold, and
// returns them as Departed events: an ordinary node keeps only the
// supernodes of its latest partial view (overlay/view). Their sequence
// marks stay, so an older announcement of theirs is still refused.
func (d *Directory) Retain(keep func(peer.ID) bool) []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	var evs []Event
	for id := range d.entries {
		if !keep(id) {
			delete(d.entries, id)
			evs = append(evs, Event{Kind: Departed, ID: id})
		}
	}
	if len(evs) > 0 {
		d.changedLocked(true)
	}
	return evs
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
	if l := d.limits; l.Interval > 0 {
		for id, b := range d.signers {
			if b.idle(float64(l.PerSigner), l.Interval, now) {
				delete(d.signers, id)
			}
		}
		size := float64(max(l.PerForwarder, 2*len(d.entries)))
		for id, b := range d.forwarders {
			if b.idle(size, l.Interval, now) {
				delete(d.forwarders, id)
			}
		}
	}
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
