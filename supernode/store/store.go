package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Quota bounds what one recipient, sender or group may hold. Bytes are
// counted as len(key)+len(value) of the records the store writes.
type Quota struct {
	Count int
	Bytes int64
}

// Limits bounds the store. The zero value of a field takes its default
// (see DefaultLimits); a negative field is an error from Open.
type Limits struct {
	// MaxBytes bounds all stored bytes, offline and replay, keys and
	// values. Default 1 GiB (--store-max-bytes). The file itself can be
	// larger, by bbolt's page, branch and freelist overhead.
	MaxBytes int64
	// OfflinePerRecipient bounds the messages held for one recipient.
	// Default 1,000 messages / 16 MiB.
	OfflinePerRecipient Quota
	// OfflinePerSender bounds one sender's messages to all recipients in
	// this store. Default 1,000 messages / 16 MiB.
	OfflinePerSender Quota
	// ReplayPerGroup bounds one group's replay log. Default 4,096
	// messages / 8 MiB.
	ReplayPerGroup Quota
	// ReplayMaxAge is how long a replay entry is kept; Expire removes
	// older ones. Default 10 minutes.
	ReplayMaxAge time.Duration
	// ReplayTotalBytes bounds all replay logs together, and with them the
	// memory the logs take. Default 256 MiB.
	ReplayTotalBytes int64
}

// DefaultLimits returns the defaults.
func DefaultLimits() Limits {
	return Limits{
		MaxBytes:            1 << 30,
		OfflinePerRecipient: Quota{Count: 1000, Bytes: 16 << 20},
		OfflinePerSender:    Quota{Count: 1000, Bytes: 16 << 20},
		ReplayPerGroup:      Quota{Count: 4096, Bytes: 8 << 20},
		ReplayMaxAge:        10 * time.Minute,
		ReplayTotalBytes:    256 << 20,
	}
}

// withDefaults fills zero fields and rejects negative ones, naming the
// field.
func (l Limits) withDefaults() (Limits, error) {
	d := DefaultLimits()
	type i64 struct {
		name string
		v    *int64
		def  int64
	}
	type quota struct {
		name string
		q    *Quota
		def  Quota
	}
	for _, f := range []i64{
		{"MaxBytes", &l.MaxBytes, d.MaxBytes},
		{"ReplayTotalBytes", &l.ReplayTotalBytes, d.ReplayTotalBytes},
		{"ReplayMaxAge", (*int64)(&l.ReplayMaxAge), int64(d.ReplayMaxAge)},
	} {
		if *f.v < 0 {
			return l, fmt.Errorf("store: limits: %s is negative (%d)", f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	for _, f := range []quota{
		{"OfflinePerRecipient", &l.OfflinePerRecipient, d.OfflinePerRecipient},
		{"OfflinePerSender", &l.OfflinePerSender, d.OfflinePerSender},
		{"ReplayPerGroup", &l.ReplayPerGroup, d.ReplayPerGroup},
	} {
		if f.q.Count < 0 || f.q.Bytes < 0 {
			return l, fmt.Errorf("store: limits: %s is negative (%d messages, %d bytes)", f.name, f.q.Count, f.q.Bytes)
		}
		if f.q.Count == 0 {
			f.q.Count = f.def.Count
		}
		if f.q.Bytes == 0 {
			f.q.Bytes = f.def.Bytes
		}
	}
	return l, nil
}

type options struct {
	now           func() time.Time
	flushInterval time.Duration
	batchDelay    time.Duration
	lockTimeout   time.Duration
	onFlush       func(n int, err error) // test hook, see export_test.go
}

// Option configures Open.
type Option func(*options)

// WithClock sets the clock the store reads for expiry and entry times.
// Default time.Now.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.now = now
		}
	}
}

// WithFlushInterval sets the replay write-behind interval: how long after
// the first unflushed append the background flusher writes. Default 20ms;
// non-positive values keep the default.
func WithFlushInterval(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.flushInterval = d
		}
	}
}

// WithBatchDelay sets how long PutOffline waits to gather concurrent puts
// into one commit (bbolt's MaxBatchDelay). Default 1ms: a put that finds
// no company pays it once; concurrent puts share one commit and fsync.
// With no delay each concurrent put waits for an fsync of its own (see
// BenchmarkPutOffline: on a ~0.8ms-fsync disk, 16 parallel putters took
// about 1ms per put without the delay and 0.2ms with it).
func WithBatchDelay(d time.Duration) Option {
	return func(o *options) {
		if d >= 0 {
			o.batchDelay = d
		}
	}
}

// Bucket names and the format marker.
var (
	bucketMeta    = []byte("meta")
	bucketOffline = []byte("offline")
	bucketIDs     = []byte("offline-ids")
	bucketExpiry  = []byte("offline-expiry")
	bucketReplay  = []byte("replay")
	keyFormat     = []byte("format")
	formatV1      = []byte("overlayd-store/1")
)

// usage is a count and byte total.
type usage struct {
	count int
	bytes int64
}

// Store is the supernode's on-disk store. All methods are safe for
// concurrent use.
type Store struct {
	path string
	lim  Limits
	opt  options
	db   *bolt.DB

	// life gates disk access against Close: operations hold it shared,
	// Close takes it exclusively before closing the database.
	life sync.RWMutex

	flushMu sync.Mutex // serialises flushes

	mu        sync.Mutex // guards everything below
	closed    bool
	bytes     int64 // offline + replay
	offBytes  int64
	offCount  int
	recipient map[string]*usage
	sender    map[string]*usage
	logs      map[string]*rlog
	heads     heads // the non-empty logs, oldest head first
	replayB   int64
	replayN   int
	pending   map[string][]byte // replay key -> value to put, nil to delete
	stats     Stats

	kick chan struct{} // buffered 1: pending became non-empty
	stop chan struct{}
	done chan struct{}
}

// Open opens or creates the store file at path (mode 0600; the parent
// directory must exist) and rebuilds the in-memory indexes from it. A file
// that is not a valid store, or holds a record that does not decode, is an
// error wrapping ErrCorrupt; it is never wiped or repaired. A file locked by
// another process fails after about a second.
func Open(path string, lim Limits, opts ...Option) (*Store, error) {
	lim, err := lim.withDefaults()
	if err != nil {
		return nil, err
	}
	o := options{now: time.Now, flushInterval: 20 * time.Millisecond, batchDelay: time.Millisecond, lockTimeout: time.Second}
	for _, f := range opts {
		f(&o)
	}
	db, err := openBolt(path, o.lockTimeout)
	if err != nil {
		return nil, err
	}
	db.MaxBatchDelay = o.batchDelay
	s := &Store{
		path:      path,
		lim:       lim,
		opt:       o,
		db:        db,
		recipient: make(map[string]*usage),
		sender:    make(map[string]*usage),
		logs:      make(map[string]*rlog),
		pending:   make(map[string][]byte),
		kick:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	if err := s.load(); err != nil {
		_ = db.Close()
		return nil, err
	}
	go s.flusher()
	return s, nil
}

// corrupt wraps ErrCorrupt with the path, the cause and what to do.
func corrupt(path string, cause error) error {
	return fmt.Errorf("%w: %s: %v; move it aside to start with an empty store", ErrCorrupt, path, cause)
}

// openBolt opens the bbolt file, mapping its verdicts on a bad file to
// ErrCorrupt. bbolt does not write to an existing non-empty file while
// opening it, so a bad file is left as it was.
func openBolt(path string, timeout time.Duration) (db *bolt.DB, err error) {
	defer func() {
		// bbolt can panic on some malformed files; that is a corrupt
		// file, not a crash of the daemon.
		if p := recover(); p != nil {
			db, err = nil, corrupt(path, fmt.Errorf("bbolt: %v", p))
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout})
	switch {
	case err == nil:
		return db, nil
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("store: open %s: the file is locked by another process (is another overlayd using this data dir?): %w", path, err)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch),
		errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrInvalidMapping):
		return nil, corrupt(path, err)
	}
	if fi, serr := os.Stat(path); serr == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
		// Any other failure on an existing file (short file, bad page
		// size) is a file bbolt cannot read: report it as corrupt.
		return nil, corrupt(path, err)
	}
	return nil, fmt.Errorf("store: open %s: %w", path, err)
}

// load checks the format, creates the buckets of a new store and rebuilds
// the in-memory indexes. It writes only to a new (empty) store: a file it
// refuses is left byte for byte as it was.
func (s *Store) load() error {
	fresh := false
	err := s.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			empty := true
			_ = tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
			if !empty {
				return corrupt(s.path, errors.New("a bbolt file that is not an overlayd store"))
			}
			fresh = true
			return nil
		}
		if f := meta.Get(keyFormat); !bytes.Equal(f, formatV1) {
			return corrupt(s.path, fmt.Errorf("unknown format %q", f))
		}
		for _, name := range [][]byte{bucketOffline, bucketIDs, bucketExpiry, bucketReplay} {
			if tx.Bucket(name) == nil {
				return corrupt(s.path, fmt.Errorf("bucket %q is missing", name))
			}
		}
		return nil
	})
	if err == nil && fresh {
		err = s.db.Update(func(tx *bolt.Tx) error {
			meta, err := tx.CreateBucket(bucketMeta)
			if err != nil {
				return err
			}
			if err := meta.Put(keyFormat, formatV1); err != nil {
				return err
			}
			for _, name := range [][]byte{bucketOffline, bucketIDs, bucketExpiry, bucketReplay} {
				if _, err := tx.CreateBucket(name); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			return err
		}
		return fmt.Errorf("store: open %s: %w", s.path, err)
	}
	return s.db.View(func(tx *bolt.Tx) error {
		if err := s.loadOffline(tx); err != nil {
			return err
		}
		return s.loadReplay(tx)
	})
}

// Close flushes pending replay writes, stops the flusher and closes the
// file. It is idempotent: later calls return ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	s.life.Lock()
	defer s.life.Unlock()
	ferr := s.flushPending()
	cerr := s.db.Close()
	if ferr != nil {
		return ferr
	}
	if cerr != nil {
		return fmt.Errorf("store: close %s: %w", s.path, cerr)
	}
	return nil
}

// enter takes the shared life lock for a disk operation; it fails once
// Close has begun. The caller must call s.life.RUnlock.
func (s *Store) enter() error {
	s.life.RLock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		s.life.RUnlock()
		return ErrClosed
	}
	return nil
}

// Stats is a snapshot of the store's contents and cumulative counters.
type Stats struct {
	OfflineMessages, OfflineRecipients int
	OfflineBytes                       int64
	ReplayGroups, ReplayEntries        int
	ReplayBytes                        int64
	// Bytes is offline plus replay bytes (len(key)+len(value) of the
	// records written); the file can be larger, by bbolt's overhead.
	Bytes, MaxBytes int64

	// Cumulative since Open.
	OfflineStored, OfflineDeleted, OfflineExpired, OfflineRefused uint64
	ReplayAppended, ReplayTrimmed, ReplayExpired                  uint64
	// ReplayFlushErrors counts failed write-behind flushes (the entries
	// stay pending and are retried).
	ReplayFlushErrors uint64
}

// Stats returns a snapshot.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.OfflineMessages = s.offCount
	st.OfflineRecipients = len(s.recipient)
	st.OfflineBytes = s.offBytes
	st.ReplayGroups = len(s.logs)
	st.ReplayEntries = s.replayN
	st.ReplayBytes = s.replayB
	st.Bytes = s.bytes
	st.MaxBytes = s.lim.MaxBytes
	return st
}
