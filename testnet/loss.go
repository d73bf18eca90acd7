package testnet

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/overlayd/overlayd/node"
	"github.com/overlayd/overlayd/protocol"
)

// Loss measurement: a publisher client publishes to GroupName at a steady
// rate while the network is failing; every publish it saw acknowledged
// must reach every member exactly once and in order. A publish that fails
// is retried with the same message ID (Client.PublishID) until it is
// acknowledged or its deadline passes.

// delivery is one group message a member's listener delivered.
type delivery struct {
	id         string
	epoch, seq uint64
}

// lossLog records what each client delivered of GroupName while a
// publisher runs (Network.count feeds it). Guarded by Network.mu.
type lossLog struct {
	got  map[string][]delivery // member name → deliveries in order
	gaps map[string]int        // member name → KindGap notices for the group
	// ids are the publisher's message IDs: their deliveries are recorded
	// here and not in the network's Counters, so that Run.messages,
	// which counts its own, can run while the publisher does.
	ids map[string]bool
}

// recordLocked notes one delivery of member name and reports whether it
// was one of the publisher's. n.mu is held; l may be nil.
func (l *lossLog) recordLocked(name string, d delivery) bool {
	if l == nil || !l.ids[d.id] {
		return false
	}
	l.got[name] = append(l.got[name], d)
	return true
}

// Acked is one publish the publisher saw acknowledged.
type Acked struct {
	ID         []byte
	Epoch, Seq uint64
	// Attempts is how many PublishID calls it took (1: no retry).
	Attempts int
}

// Publisher publishes to GroupName from one client at a steady rate; see
// Network.StartPublisher.
type Publisher struct {
	n      *Network
	from   *node.Node
	every  time.Duration
	retry  time.Duration
	cancel context.CancelFunc
	stop   chan struct{}
	done   chan struct{}

	mu     sync.Mutex
	acked  []Acked
	failed int // publishes given up at their deadline
	errs   int // PublishID errors (each followed by a retry or a give-up)
	last   error
}

// StartPublisher starts recording every client's deliveries of GroupName
// and a publisher on client from that publishes one message every every,
// each retried with its ID until acknowledged or retryFor has passed. The
// publisher's ctx is a child of ctx; Stop ends it.
func (n *Network) StartPublisher(ctx context.Context, from *node.Node, every, retryFor time.Duration) *Publisher {
	n.mu.Lock()
	n.loss = &lossLog{got: map[string][]delivery{}, gaps: map[string]int{}, ids: map[string]bool{}}
	n.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	p := &Publisher{n: n, from: from, every: every, retry: retryFor, cancel: cancel,
		stop: make(chan struct{}), done: make(chan struct{})}
	go p.run(ctx)
	return p
}

func (p *Publisher) run(ctx context.Context) {
	defer close(p.done)
	t := time.NewTicker(p.every)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-p.stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		p.publish(ctx, protocol.NewMessageID(), fmt.Appendf(nil, "loss %d", i))
		select {
		case <-p.stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// publish publishes one message, retrying with the same ID until it is
// acknowledged or p.retry has passed.
func (p *Publisher) publish(ctx context.Context, id, payload []byte) {
	p.n.mu.Lock()
	p.n.loss.ids[string(id)] = true
	p.n.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, p.retry)
	defer cancel()
	for attempt := 1; ; attempt++ {
		res, err := p.from.Client().PublishID(ctx, GroupName, id, payload)
		p.mu.Lock()
		if err == nil {
			p.acked = append(p.acked, Acked{ID: id, Epoch: res.Epoch, Seq: res.Seq, Attempts: attempt})
			p.mu.Unlock()
			return
		}
		p.errs++
		p.last = err
		if ctx.Err() != nil {
			p.failed++
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		// Not attached, or the home is moving: give the client a
		// moment before the next try rather than spinning.
		pause(ctx, 50*time.Millisecond)
	}
}

// pause waits d, or until ctx ends: pacing or a measurement window, not a
// wait for an event.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Acked returns the publishes acknowledged so far, in publish order.
func (p *Publisher) Acked() []Acked {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.acked)
}

// Stop stops publishing after the publish in flight (with its retries) and
// waits for it. It is idempotent, and does nothing on a nil Publisher.
func (p *Publisher) Stop() {
	if p == nil {
		return
	}
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
	p.cancel()
}

// PublisherStats are a stopped publisher's counts.
type PublisherStats struct {
	Acked   int   // publishes acknowledged
	Retried int   // acknowledged after at least one failed attempt
	Failed  int   // given up at their deadline
	Errors  int   // failed PublishID calls
	Last    error // the last of them
}

// Stats returns the publisher's counts.
func (p *Publisher) Stats() PublisherStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := PublisherStats{Acked: len(p.acked), Failed: p.failed, Errors: p.errs, Last: p.last}
	for _, a := range p.acked {
		if a.Attempts > 1 {
			s.Retried++
		}
	}
	return s
}

// MemberLoss is what one member delivered of a publisher's acknowledged
// publishes.
type MemberLoss struct {
	Name string
	// Lost are acknowledged publishes never delivered; Duplicates those
	// delivered more than once (counting the extra deliveries); OutOfOrder
	// deliveries that came after a later publish, or whose (epoch, seq) is
	// not above the previous delivery's.
	Lost, Duplicates, OutOfOrder int
	// Gaps are the KindGap notices for the group.
	Gaps int
	// FirstLost is the index in publish order of the first lost one (-1:
	// none).
	FirstLost int
}

// Loss checks every running client's deliveries against acked (in publish
// order): the members are the clients running now.
func (n *Network) Loss(acked []Acked) []MemberLoss {
	index := make(map[string]int, len(acked))
	for i, a := range acked {
		index[string(a.ID)] = i
	}
	var out []MemberLoss
	for _, c := range n.Clients() {
		name := n.Name(c)
		n.mu.Lock()
		var got []delivery
		gaps := 0
		if n.loss != nil {
			got, gaps = slices.Clone(n.loss.got[name]), n.loss.gaps[name]
		}
		n.mu.Unlock()
		ml := MemberLoss{Name: name, Gaps: gaps, FirstLost: -1}
		times := make([]int, len(acked))
		lastIdx := -1
		var lastPos seqPos
		for _, d := range got {
			if !(seqPos{d.epoch, d.seq}).after(lastPos) && lastPos != (seqPos{}) {
				ml.OutOfOrder++
			}
			lastPos = seqPos{d.epoch, d.seq}
			i, ok := index[d.id]
			if !ok {
				continue // not acknowledged: may arrive or not
			}
			if times[i]++; times[i] > 1 {
				ml.Duplicates++
				continue
			}
			if i < lastIdx {
				ml.OutOfOrder++
			}
			lastIdx = max(lastIdx, i)
		}
		for i, k := range times {
			if k == 0 {
				ml.Lost++
				if ml.FirstLost < 0 {
					ml.FirstLost = i
				}
			}
		}
		out = append(out, ml)
	}
	return out
}

// WaitDelivered waits until every running client delivered every one of
// acked, or ctx ends.
func (n *Network) WaitDelivered(ctx context.Context, acked []Acked) error {
	var lost int
	err := poll(ctx, 20*time.Millisecond, func() bool {
		lost = 0
		for _, ml := range n.Loss(acked) {
			lost += ml.Lost
		}
		return lost == 0
	})
	if err != nil {
		return fmt.Errorf("%d deliveries of %d acknowledged publishes missing: %w", lost, len(acked), err)
	}
	return nil
}

// LossTotals sums MemberLoss over the members.
type LossTotals struct {
	Members, Lost, Duplicates, OutOfOrder, Gaps int
}

// Totals sums the members' figures.
func Totals(ms []MemberLoss) LossTotals {
	t := LossTotals{Members: len(ms)}
	for _, m := range ms {
		t.Lost += m.Lost
		t.Duplicates += m.Duplicates
		t.OutOfOrder += m.OutOfOrder
		t.Gaps += m.Gaps
	}
	return t
}

func (p seqPos) after(q seqPos) bool {
	return p.epoch > q.epoch || p.epoch == q.epoch && p.seq > q.seq
}

// WaitHomeKnows waits until GroupName's home lists every running client
// as a member, so that "every member" is well defined; it returns how
// many it knew last.
func (n *Network) WaitHomeKnows(ctx context.Context) (int, error) {
	known := 0
	err := poll(ctx, 50*time.Millisecond, func() bool {
		cs := n.Clients()
		if len(cs) == 0 {
			return true
		}
		ms, err := cs[0].Client().Members(ctx, GroupName)
		known = len(ms)
		return err == nil && len(ms) == len(cs)
	})
	if err != nil {
		return known, fmt.Errorf("the group's home knows %d of %d members: %w", known, len(n.Clients()), err)
	}
	return known, nil
}
