package groupsim

import (
	"errors"
	"sort"
	"time"

	"github.com/overlayd/overlayd/supernode/group"
)

const (
	// flushEvery is the store's write-behind: an append is on disk at
	// the next flush.
	flushEvery = 20 * time.Millisecond
	// logBound is the entries a group's log keeps (the store's bound).
	logBound = 4096
)

var errDiskFull = errors.New("groupsim: append failed (disk full)")

// memLog is a supernode's replay log in memory with the store's
// semantics (supernode/store/replay.go) and its write-behind: a crash
// keeps what was flushed.
type memLog struct {
	s     *sim
	n     *snode
	phase time.Duration
	g     map[string][]logEntry
}

type logEntry struct {
	e       group.Entry
	durable time.Duration // when the flush that writes it happens
}

var _ group.Log = (*memLog)(nil)

func newMemLog(s *sim, n *snode) *memLog {
	return &memLog{s: s, n: n, phase: s.dur(0, flushEvery), g: map[string][]logEntry{}}
}

func pos(e group.Entry) group.Pos { return group.Pos{Epoch: e.Epoch, Seq: e.Seq} }

// nextFlush is the first flush after now.
func (l *memLog) nextFlush(now time.Duration) time.Duration {
	k := (now-l.phase)/flushEvery + 1
	return l.phase + k*flushEvery
}

func (l *memLog) AppendReplay(g string, e group.Entry) error {
	if l.s.on[FaultAppendFail] && l.s.chance(l.s.failP) {
		l.s.fault(FaultAppendFail)
		l.s.tracef(l.n.name, "append FAILED g=%s %d.%d", g, e.Epoch%1000, e.Seq)
		return errDiskFull
	}
	es := l.g[g]
	if len(es) > 0 && !pos(e).After(pos(es[len(es)-1].e)) {
		// At or below the last position: ignored. Held or not?
		i := sort.Search(len(es), func(i int) bool { return !pos(e).After(pos(es[i].e)) })
		if (i == len(es) || pos(es[i].e) != pos(e)) && pos(e).After(pos(es[0].e)) {
			l.s.diag.flag(l.s, SuspectLogHole, g)
		}
		return nil
	}
	if len(es) >= logBound {
		es = es[1:]
	}
	e.Data = append([]byte(nil), e.Data...)
	l.g[g] = append(es, logEntry{e: e, durable: l.nextFlush(l.s.now)})
	return nil
}

func (l *memLog) ReplayAfter(g string, after group.Pos, limit int) ([]group.Entry, group.Pos, bool) {
	es := l.g[g]
	if len(es) == 0 {
		return nil, group.Pos{}, false
	}
	i := sort.Search(len(es), func(i int) bool { return pos(es[i].e).After(after) })
	n := len(es) - i
	if limit > 0 && n > limit {
		n = limit
	}
	var out []group.Entry
	for _, le := range es[i : i+n] {
		out = append(out, le.e)
	}
	return out, pos(es[0].e), true
}

func (l *memLog) ReplayLast(g string) (group.Pos, bool) {
	es := l.g[g]
	if len(es) == 0 {
		return group.Pos{}, false
	}
	return pos(es[len(es)-1].e), true
}

// crash keeps what was flushed by now.
func (l *memLog) crash(now time.Duration) {
	for _, g := range sortedKeys(l.g) {
		es := l.g[g]
		i := sort.Search(len(es), func(i int) bool { return es[i].durable > now })
		if i < len(es) {
			l.s.tracef(l.n.name, "log g=%s lost %d unflushed entries", g, len(es)-i)
		}
		if i == 0 {
			delete(l.g, g)
			continue
		}
		l.g[g] = es[:i]
	}
}
