package store

import (
	"container/heap"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Entry is one numbered group message in a replay log.
type Entry struct {
	Epoch, Seq uint64
	// Data is opaque to the store (an encoded group message). The store
	// keeps its own copy; slices it returns are shared and must not be
	// modified.
	Data []byte
	// At is when the message was numbered; AppendReplay sets it from the
	// clock when zero. Expire removes entries older than ReplayMaxAge.
	At time.Time
}

// Pos is a position in a group's log.
type Pos struct{ Epoch, Seq uint64 }

func (p Pos) less(q Pos) bool { return p.Epoch < q.Epoch || p.Epoch == q.Epoch && p.Seq < q.Seq }

type rentry struct {
	Entry
	size int64
}

// rlog is one group's replay log in memory: entries[head:] in (epoch, seq)
// order.
type rlog struct {
	group   string
	entries []rentry
	head    int
	bytes   int64
	hidx    int // index in Store.heads
}

// heads orders the non-empty logs by their oldest entry (At, then group),
// so the oldest head across groups is found in O(1) and replaced in
// O(log groups) when trimming to the totals and expiring.
type heads []*rlog

func (h heads) Len() int { return len(h) }
func (h heads) Less(i, j int) bool {
	a, b := h[i].first().At, h[j].first().At
	return a.Before(b) || a.Equal(b) && h[i].group < h[j].group
}
func (h heads) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i, j
}
func (h *heads) Push(x any) {
	l := x.(*rlog)
	l.hidx = len(*h)
	*h = append(*h, l)
}
func (h *heads) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.hidx = -1
	return l
}

func (l *rlog) len() int            { return len(l.entries) - l.head }
func (l *rlog) first() *rentry      { return &l.entries[l.head] }
func (l *rlog) last() *rentry       { return &l.entries[len(l.entries)-1] }
func (l *rlog) live() []rentry      { return l.entries[l.head:] }
func (p rentry) pos() Pos           { return Pos{p.Epoch, p.Seq} }
func (l *rlog) lastPos() Pos        { return l.last().pos() }
func (l *rlog) firstPos() Pos       { return l.first().pos() }
func (l *rlog) push(e rentry)       { l.entries = append(l.entries, e); l.bytes += e.size }
func (l *rlog) key(e rentry) []byte { return replayKey(l.group, e.Epoch, e.Seq) }

// pop removes the oldest entry and returns it.
func (l *rlog) pop() rentry {
	e := l.entries[l.head]
	l.entries[l.head] = rentry{}
	l.head++
	l.bytes -= e.size
	if l.head > 32 && l.head > len(l.entries)/2 {
		n := copy(l.entries, l.entries[l.head:])
		clear(l.entries[n:])
		l.entries = l.entries[:n]
		l.head = 0
	}
	return e
}

// AppendReplay appends entries to group's log. They are in memory at once
// (ReplayAfter sees them) and written to disk by the background flusher
// within one flush interval, in one transaction (write-behind; Close
// flushes). An entry at or below the log's last position is ignored, as is
// one already older than ReplayMaxAge. After each entry the group's log is
// trimmed oldest-first to ReplayPerGroup and all logs to ReplayTotalBytes
// (oldest head across groups first). If MaxBytes would be exceeded, replay
// entries are trimmed oldest-first to make room; if there is still no room
// AppendReplay returns ErrFull, keeping the entries before the one that did
// not fit. Expire removes entries from the head of each log, so a log is
// taken to be appended in time order. group is 1..256 bytes; an entry at position (0, 0), or one larger
// than the per-group or total replay bytes, is ErrInvalid.
func (s *Store) AppendReplay(group string, entries ...Entry) error {
	if len(group) == 0 || len(group) > maxGroupLen {
		return fmt.Errorf("%w: group is %d bytes (1..%d)", ErrInvalid, len(group), maxGroupLen)
	}
	now := s.opt.now()
	cutoff := now.Add(-s.lim.ReplayMaxAge)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	defer s.kickLocked()
	for _, e := range entries {
		if e.Epoch == 0 && e.Seq == 0 {
			return fmt.Errorf("%w: replay entry at position (0, 0)", ErrInvalid)
		}
		if e.At.IsZero() {
			e.At = now
		}
		if e.At.Before(cutoff) {
			continue
		}
		if e.At.After(maxUnixNano) || e.At.Before(time.Unix(0, -1<<63)) {
			return fmt.Errorf("%w: replay entry time %v out of range", ErrInvalid, e.At)
		}
		l := s.logs[group]
		if l != nil && !l.lastPos().less(Pos{e.Epoch, e.Seq}) {
			continue
		}
		size := replaySize(group, len(e.Data))
		if size > s.lim.ReplayPerGroup.Bytes || size > s.lim.ReplayTotalBytes {
			return fmt.Errorf("%w: replay entry of %d bytes exceeds the replay quota", ErrInvalid, size)
		}
		for s.bytes+size > s.lim.MaxBytes {
			if !s.trimOldestLocked() {
				return fmt.Errorf("%w: store holds %d bytes (%d offline), a %d-byte replay entry would exceed the limit %d",
					ErrFull, s.bytes, s.offBytes, size, s.lim.MaxBytes)
			}
		}
		e.Data = append([]byte(nil), e.Data...)
		re := rentry{Entry: e, size: size}
		if l = s.logs[group]; l == nil {
			l = &rlog{group: group}
			s.logs[group] = l
			l.push(re)
			heap.Push(&s.heads, l)
		} else {
			l.push(re)
		}
		s.replayN++
		s.replayB += size
		s.bytes += size
		s.pending[string(l.key(re))] = encodeReplay(e.At.UnixNano(), e.Data)
		s.stats.ReplayAppended++
		q := s.lim.ReplayPerGroup
		for l.len() > q.Count || l.bytes > q.Bytes {
			s.popLocked(l)
			s.stats.ReplayTrimmed++
		}
		for s.replayB > s.lim.ReplayTotalBytes && s.trimOldestLocked() {
		}
	}
	return nil
}

// trimOldestLocked removes the oldest head across all logs (by At, then
// group), counting it as trimmed; false when no log holds anything.
func (s *Store) trimOldestLocked() bool {
	if len(s.heads) == 0 {
		return false
	}
	s.popLocked(s.heads[0])
	s.stats.ReplayTrimmed++
	return true
}

// popLocked removes l's oldest entry from memory and schedules its deletion
// on disk; an empty log is dropped.
func (s *Store) popLocked(l *rlog) {
	e := l.pop()
	s.replayN--
	s.replayB -= e.size
	s.bytes -= e.size
	k := string(l.key(e))
	// Always a delete, even when the put is still pending: an older
	// copy of the same key may be on disk (a log dropped when empty
	// forgets its positions, so a repeat can be appended again).
	s.pending[k] = nil
	if l.len() == 0 {
		delete(s.logs, l.group)
		heap.Remove(&s.heads, l.hidx)
	} else {
		heap.Fix(&s.heads, l.hidx)
	}
}

// ReplayAfter returns up to limit entries (limit <= 0: all) of group's log
// strictly after (epoch, seq), in (epoch, seq) order, from memory. first is
// the oldest position still held; ok is false when the log is empty.
func (s *Store) ReplayAfter(group string, epoch, seq uint64, limit int) (entries []Entry, first Pos, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.logs[group]
	if l == nil {
		return nil, Pos{}, false
	}
	live := l.live()
	after := Pos{epoch, seq}
	i := sort.Search(len(live), func(i int) bool { return after.less(live[i].pos()) })
	n := len(live) - i
	if limit > 0 && n > limit {
		n = limit
	}
	if n > 0 {
		entries = make([]Entry, n)
		for j := range entries {
			entries[j] = live[i+j].Entry
		}
	}
	return entries, l.firstPos(), true
}

// ReplayLast is the newest position held for group.
func (s *Store) ReplayLast(group string) (Pos, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.logs[group]; l != nil {
		return l.lastPos(), true
	}
	return Pos{}, false
}

// expireReplayLocked removes the entries older than ReplayMaxAge, oldest
// head first across the logs.
func (s *Store) expireReplayLocked(now time.Time) int {
	cutoff := now.Add(-s.lim.ReplayMaxAge)
	n := 0
	for len(s.heads) > 0 && s.heads[0].first().At.Before(cutoff) {
		s.popLocked(s.heads[0])
		n++
	}
	s.stats.ReplayExpired += uint64(n)
	if n > 0 {
		s.kickLocked()
	}
	return n
}

// Expire removes the offline messages whose Expires has passed and the
// replay entries older than ReplayMaxAge, and returns how many of each.
func (s *Store) Expire() (offline, replay int, err error) {
	if err := s.enter(); err != nil {
		return 0, 0, err
	}
	defer s.life.RUnlock()
	now := s.opt.now()
	s.mu.Lock()
	replay = s.expireReplayLocked(now)
	s.mu.Unlock()
	offline, err = s.expireOffline(now.UnixNano())
	return offline, replay, err
}

// kickLocked wakes the flusher when writes are pending.
func (s *Store) kickLocked() {
	if len(s.pending) == 0 {
		return
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// flusher writes pending replay changes one flush interval after the
// first of them; it stops when Close begins (Close then flushes).
func (s *Store) flusher() {
	defer close(s.done)
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		}
		t := time.NewTimer(s.opt.flushInterval)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
		s.life.RLock()
		_ = s.flushPending()
		s.life.RUnlock()
	}
}

// Flush writes pending replay changes now, in one transaction.
func (s *Store) Flush() error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	return s.flushPending()
}

// flushPending writes the pending replay changes. The caller holds s.life
// (shared or exclusive). On failure the changes stay pending (newer ones
// win) and are retried.
func (s *Store) flushPending() error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	batch := s.pending
	if len(batch) == 0 {
		s.mu.Unlock()
		return nil
	}
	s.pending = make(map[string][]byte)
	s.mu.Unlock()
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketReplay)
		for k, v := range batch {
			var err error
			if v == nil {
				err = b.Delete([]byte(k))
			} else {
				err = b.Put([]byte(k), v)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	s.mu.Lock()
	if err != nil {
		err = fmt.Errorf("store: flush replay: %w", err)
		s.stats.ReplayFlushErrors++
		for k, v := range batch {
			if _, newer := s.pending[k]; !newer {
				s.pending[k] = v
			}
		}
		s.kickLocked()
	}
	s.mu.Unlock()
	if s.opt.onFlush != nil {
		s.opt.onFlush(len(batch), err)
	}
	return err
}

// loadReplay rebuilds the replay logs from disk, then applies the current
// limits (which may be lower than those the file was written under).
func (s *Store) loadReplay(tx *bolt.Tx) error {
	err := tx.Bucket(bucketReplay).ForEach(func(k, v []byte) error {
		group, epoch, seq, ok := parseReplayKey(k)
		if !ok {
			return corrupt(s.path, fmt.Errorf("replay key %x does not decode", k))
		}
		r, err := decodeRecord(v)
		if err == nil && r.kind != kindReplay {
			err = fmt.Errorf("record kind 0x%02x in the replay bucket", r.kind)
		}
		if err != nil {
			return corrupt(s.path, fmt.Errorf("replay record %x: %w", k, err))
		}
		l := s.logs[group]
		if l == nil {
			l = &rlog{group: group}
			s.logs[group] = l
		}
		size := int64(len(k) + len(v))
		l.push(rentry{Entry: Entry{Epoch: epoch, Seq: seq, Data: append([]byte(nil), r.data...), At: time.Unix(0, r.at)}, size: size})
		s.replayN++
		s.replayB += size
		s.bytes += size
		return nil
	})
	if err != nil {
		return err
	}
	for _, l := range s.logs {
		heap.Push(&s.heads, l)
	}
	q := s.lim.ReplayPerGroup
	for _, l := range s.logs {
		for l.len() > q.Count || l.bytes > q.Bytes {
			s.popLocked(l)
			s.stats.ReplayTrimmed++
		}
	}
	for s.replayB > s.lim.ReplayTotalBytes && s.trimOldestLocked() {
	}
	s.kickLocked()
	return nil
}
