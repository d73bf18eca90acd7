package store

import (
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Offline is a direct message held for a recipient that is not attached.
type Offline struct {
	// Recipient and Sender are binary peer IDs (string(peer.ID)); the
	// store does not parse them. Both are 1..256 bytes.
	Recipient, Sender string
	// ID is the message id, 1..64 bytes.
	ID []byte
	// Data is the encoded message, opaque to the store, non-empty.
	Data []byte
	// Expires must be after now.
	Expires time.Time
}

// maxUnixNano is the last time a UnixNano can hold.
var maxUnixNano = time.Unix(0, 1<<63-1)

func (s *Store) validOffline(o Offline, now time.Time) error {
	switch {
	case len(o.Recipient) == 0 || len(o.Recipient) > maxPeerLen:
		return fmt.Errorf("%w: recipient is %d bytes (1..%d)", ErrInvalid, len(o.Recipient), maxPeerLen)
	case len(o.Sender) == 0 || len(o.Sender) > maxPeerLen:
		return fmt.Errorf("%w: sender is %d bytes (1..%d)", ErrInvalid, len(o.Sender), maxPeerLen)
	case len(o.ID) == 0 || len(o.ID) > maxIDLen:
		return fmt.Errorf("%w: id is %d bytes (1..%d)", ErrInvalid, len(o.ID), maxIDLen)
	case len(o.Data) == 0:
		return fmt.Errorf("%w: empty data", ErrInvalid)
	case !o.Expires.After(now):
		return fmt.Errorf("%w: expires %v is not after now %v", ErrInvalid, o.Expires, now)
	case o.Expires.UnixNano() <= 0:
		return fmt.Errorf("%w: expires %v is before 1970", ErrInvalid, o.Expires)
	case o.Expires.After(maxUnixNano):
		return fmt.Errorf("%w: expires %v is too far ahead", ErrInvalid, o.Expires)
	}
	return nil
}

// PutOffline stores o durably: it is committed and fsynced before
// PutOffline returns; concurrent puts share a commit. It is idempotent on
// (Recipient, Sender, ID): storing a message again returns (false, nil)
// and charges nothing. Before writing anything it checks, in order: o is
// valid (else ErrInvalid); the recipient's and the sender's quotas (else an
// error wrapping ErrOverQuota that names the quota and its numbers);
// MaxBytes (else ErrFull). It returns (true, nil) when stored.
func (s *Store) PutOffline(o Offline) (bool, error) {
	if err := s.enter(); err != nil {
		return false, err
	}
	defer s.life.RUnlock()
	if err := s.validOffline(o, s.opt.now()); err != nil {
		return false, err
	}
	ik := idKey(o.Recipient, o.Sender, o.ID)
	var dup bool
	if err := s.db.View(func(tx *bolt.Tx) error {
		dup = tx.Bucket(bucketIDs).Get(ik) != nil
		return nil
	}); err != nil {
		return false, fmt.Errorf("store: put offline: %w", err)
	}
	if dup {
		return false, nil
	}
	size := offlineSize(o.Recipient, o.Sender, len(o.ID), len(o.Data))
	if err := s.reserveOffline(o.Recipient, o.Sender, size); err != nil {
		return false, err
	}
	expires := o.Expires.UnixNano()
	value := encodeOffline(o.Sender, o.ID, expires, o.Data)
	var stored bool
	err := s.db.Batch(func(tx *bolt.Tx) error {
		stored = false
		ids := tx.Bucket(bucketIDs)
		if ids.Get(ik) != nil {
			return nil // a concurrent put of the same message won
		}
		msgs := tx.Bucket(bucketOffline)
		seq, err := msgs.NextSequence()
		if err != nil {
			return err
		}
		mk := offlineKey(o.Recipient, seq)
		if err := msgs.Put(mk, value); err != nil {
			return err
		}
		if err := ids.Put(ik, binary.BigEndian.AppendUint64(nil, seq)); err != nil {
			return err
		}
		if err := tx.Bucket(bucketExpiry).Put(expKey(expires, seq), mk); err != nil {
			return err
		}
		stored = true
		return nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || !stored {
		s.releaseOfflineLocked(o.Recipient, o.Sender, size)
		if err != nil {
			return false, fmt.Errorf("store: put offline: %w", err)
		}
		return false, nil
	}
	s.stats.OfflineStored++
	return true, nil
}

// reserveOffline checks the quotas and MaxBytes and charges size to them.
func (s *Store) reserveOffline(recipient, sender string, size int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, snd := s.recipient[recipient], s.sender[sender]
	var ru, su usage
	if r != nil {
		ru = *r
	}
	if snd != nil {
		su = *snd
	}
	var err error
	switch rq, sq := s.lim.OfflinePerRecipient, s.lim.OfflinePerSender; {
	case ru.count+1 > rq.Count:
		err = fmt.Errorf("%w: recipient holds %d messages (limit %d)", ErrOverQuota, ru.count, rq.Count)
	case ru.bytes+size > rq.Bytes:
		err = fmt.Errorf("%w: recipient holds %d bytes, %d more would exceed the limit %d", ErrOverQuota, ru.bytes, size, rq.Bytes)
	case su.count+1 > sq.Count:
		err = fmt.Errorf("%w: sender holds %d messages (limit %d)", ErrOverQuota, su.count, sq.Count)
	case su.bytes+size > sq.Bytes:
		err = fmt.Errorf("%w: sender holds %d bytes, %d more would exceed the limit %d", ErrOverQuota, su.bytes, size, sq.Bytes)
	case s.bytes+size > s.lim.MaxBytes:
		err = fmt.Errorf("%w: store holds %d bytes, %d more would exceed the limit %d", ErrFull, s.bytes, size, s.lim.MaxBytes)
	}
	if err != nil {
		s.stats.OfflineRefused++
		return err
	}
	s.chargeOfflineLocked(recipient, sender, size)
	return nil
}

func (s *Store) chargeOfflineLocked(recipient, sender string, size int64) {
	for _, m := range []struct {
		m map[string]*usage
		k string
	}{{s.recipient, recipient}, {s.sender, sender}} {
		u := m.m[m.k]
		if u == nil {
			u = &usage{}
			m.m[m.k] = u
		}
		u.count++
		u.bytes += size
	}
	s.offCount++
	s.offBytes += size
	s.bytes += size
}

func (s *Store) releaseOfflineLocked(recipient, sender string, size int64) {
	for _, m := range []struct {
		m map[string]*usage
		k string
	}{{s.recipient, recipient}, {s.sender, sender}} {
		if u := m.m[m.k]; u != nil {
			u.count--
			u.bytes -= size
			if u.count <= 0 {
				delete(m.m, m.k)
			}
		}
	}
	s.offCount--
	s.offBytes -= size
	s.bytes -= size
}

// Offline returns up to limit unexpired messages held for recipient, in
// the order they were put (limit <= 0: all). The slices are copies.
func (s *Store) Offline(recipient string, limit int) ([]Offline, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	now := s.opt.now().UnixNano()
	prefix := appendComponent(nil, recipient)
	var out []Offline
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketOffline).Cursor()
		for k, v := c.Seek(prefix); k != nil && hasPrefix(k, prefix); k, v = c.Next() {
			if limit > 0 && len(out) >= limit {
				break
			}
			r, err := decodeRecord(v)
			if err != nil || r.kind != kindOffline {
				return fmt.Errorf("%w: %s: offline record %x: %v", ErrCorrupt, s.path, k, err)
			}
			if r.expires <= now {
				continue
			}
			out = append(out, Offline{
				Recipient: recipient,
				Sender:    r.sender,
				ID:        append([]byte(nil), r.id...),
				Data:      append([]byte(nil), r.data...),
				Expires:   time.Unix(0, r.expires),
			})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: list offline: %w", err)
	}
	return out, nil
}

func hasPrefix(b, p []byte) bool { return len(b) >= len(p) && string(b[:len(p)]) == string(p) }

// removed describes an offline message deleted in a transaction, so the
// counters can be updated after it commits.
type removed struct {
	recipient, sender string
	size              int64
}

// deleteOfflineTx removes the message at mk (with its index records).
func deleteOfflineTx(tx *bolt.Tx, mk []byte) (removed, error) {
	msgs := tx.Bucket(bucketOffline)
	v := msgs.Get(mk)
	recipient, seq, ok := parseOfflineKey(mk)
	if v == nil || !ok {
		return removed{}, fmt.Errorf("%w: offline key %x", ErrCorrupt, mk)
	}
	r, err := decodeRecord(v)
	if err != nil || r.kind != kindOffline {
		return removed{}, fmt.Errorf("%w: offline record %x: %v", ErrCorrupt, mk, err)
	}
	size := offlineSize(recipient, r.sender, len(r.id), len(r.data))
	for _, d := range []struct {
		b []byte
		k []byte
	}{
		{bucketIDs, idKey(recipient, r.sender, r.id)},
		{bucketExpiry, expKey(r.expires, seq)},
		{bucketOffline, mk},
	} {
		if err := tx.Bucket(d.b).Delete(d.k); err != nil {
			return removed{}, err
		}
	}
	return removed{recipient: recipient, sender: r.sender, size: size}, nil
}

// DeleteOffline removes one message and reports whether it was there.
func (s *Store) DeleteOffline(recipient, sender string, id []byte) (bool, error) {
	if err := s.enter(); err != nil {
		return false, err
	}
	defer s.life.RUnlock()
	ik := idKey(recipient, sender, id)
	var rm *removed
	err := s.db.Update(func(tx *bolt.Tx) error {
		sv := tx.Bucket(bucketIDs).Get(ik)
		if sv == nil {
			return nil
		}
		if len(sv) != 8 {
			return fmt.Errorf("%w: offline id index %x", ErrCorrupt, ik)
		}
		r, err := deleteOfflineTx(tx, offlineKey(recipient, binary.BigEndian.Uint64(sv)))
		if err != nil {
			return err
		}
		rm = &r
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("store: delete offline: %w", err)
	}
	if rm == nil {
		return false, nil
	}
	s.mu.Lock()
	s.releaseOfflineLocked(rm.recipient, rm.sender, rm.size)
	s.stats.OfflineDeleted++
	s.mu.Unlock()
	return true, nil
}

// OfflineCount is the number of messages held for recipient (including
// expired ones not yet removed by Expire), from memory.
func (s *Store) OfflineCount(recipient string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := s.recipient[recipient]; u != nil {
		return u.count
	}
	return 0
}

// expireOffline removes the offline messages whose expiry has passed, in
// transactions of at most expireBatch.
func (s *Store) expireOffline(now int64) (int, error) {
	const expireBatch = 1000
	total := 0
	for {
		var rms []removed
		err := s.db.Update(func(tx *bolt.Tx) error {
			rms = rms[:0]
			c := tx.Bucket(bucketExpiry).Cursor()
			var mks [][]byte
			for k, v := c.First(); k != nil && len(mks) < expireBatch; k, v = c.Next() {
				if len(k) != 16 {
					return fmt.Errorf("%w: offline expiry key %x", ErrCorrupt, k)
				}
				if int64(binary.BigEndian.Uint64(k)) > now {
					break
				}
				mks = append(mks, append([]byte(nil), v...))
			}
			for _, mk := range mks {
				r, err := deleteOfflineTx(tx, mk)
				if err != nil {
					return err
				}
				rms = append(rms, r)
			}
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("store: expire offline: %w", err)
		}
		s.mu.Lock()
		for _, r := range rms {
			s.releaseOfflineLocked(r.recipient, r.sender, r.size)
		}
		s.stats.OfflineExpired += uint64(len(rms))
		s.mu.Unlock()
		total += len(rms)
		if len(rms) < expireBatch {
			return total, nil
		}
	}
}

// loadOffline rebuilds the per-recipient and per-sender counters, decoding
// every offline record.
func (s *Store) loadOffline(tx *bolt.Tx) error {
	return tx.Bucket(bucketOffline).ForEach(func(k, v []byte) error {
		recipient, _, ok := parseOfflineKey(k)
		if !ok {
			return corrupt(s.path, fmt.Errorf("offline key %x does not decode", k))
		}
		r, err := decodeRecord(v)
		if err == nil && r.kind != kindOffline {
			err = fmt.Errorf("record kind 0x%02x in the offline bucket", r.kind)
		}
		if err != nil {
			return corrupt(s.path, fmt.Errorf("offline record %x: %w", k, err))
		}
		s.chargeOfflineLocked(recipient, r.sender, offlineSize(recipient, r.sender, len(r.id), len(r.data)))
		return nil
	})
}
