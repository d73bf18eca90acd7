package dirdriver

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// announceAddrs are the addresses a supernode announces: the configured
// announce addresses, else its listen addresses without loopback ones unless
// it has nothing else.
func (d *Driver) announceAddrs() []ma.Multiaddr {
	if len(d.cfg.AnnounceAddrs) > 0 {
		return d.cfg.AnnounceAddrs
	}
	all := d.cfg.Host.Addrs()
	var public []ma.Multiaddr
	for _, a := range all {
		if !manet.IsIPLoopback(a) {
			public = append(public, a)
		}
	}
	if len(public) == 0 {
		return all
	}
	return public
}

// PublishAnnouncement publishes this supernode's next announcement now
// (departing: its last).
func (d *Driver) PublishAnnouncement(ctx context.Context, departing bool) error {
	if d.topic == nil || d.cfg.Announcer == nil {
		return errors.New("dirdriver: this node does not announce (no announcement topic or no announcer)")
	}
	b, err := d.cfg.Announcer.Next(d.announceAddrs(), d.cfg.Load(), departing, d.now())
	if err != nil {
		return err
	}
	return d.topic.Publish(ctx, b)
}

// announceLoop publishes this supernode's announcement now and then on
// the announceSchedule.
func (d *Driver) announceLoop(ctx context.Context) {
	sched := newAnnounceSchedule(d.cfg.AnnounceInterval, rand.New(rand.NewPCG(d.cfg.Seed(), d.cfg.Seed())))
	next := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
		iv := d.tierInterval()
		if err := d.cfg.Announcer.SetInterval(iv); err != nil {
			d.log.Warn("announce interval", "err", err)
		}
		if err := d.PublishAnnouncement(ctx, false); err != nil && ctx.Err() == nil {
			d.log.Warn("announce", "err", err)
		}
		sched.interval = iv
		next = sched.next()
	}
}

// announceSchedule spaces a supernode's announcements. After the first,
// which goes out at once so that a new supernode is known quickly, the
// second comes at a uniformly random point of the next interval, and every
// later one an interval less up to 10% after the one before. The random
// phase matters when supernodes start together (a fleet restarted after an
// outage, a testnet): with only the 10% jitter they would announce within a
// tenth of an interval of each other for many intervals, and every node in
// the network would verify all their signatures in one burst. No gap
// exceeds the interval, so entries stay far from expiry (MissedAnnouncements
// intervals).
type announceSchedule struct {
	interval time.Duration
	rng      *rand.Rand
	phased   bool
}

func newAnnounceSchedule(interval time.Duration, rng *rand.Rand) *announceSchedule {
	return &announceSchedule{interval: interval, rng: rng}
}

// next returns the wait before the next announcement.
func (s *announceSchedule) next() time.Duration {
	if !s.phased {
		s.phased = true
		return 1 + time.Duration(s.rng.Int64N(int64(s.interval)))
	}
	return s.interval - time.Duration(s.rng.Int64N(int64(s.interval/10)+1))
}

// Joined reports whether this node joined the announcement topic (Join,
// on a node that does not keep a partial view): only then can it announce.
func (d *Driver) Joined() bool { return d.topic != nil }

// AnnounceDeparture tells the network this supernode stops serving, and
// gives the message a moment to leave before the host closes (GossipSub has
// no flush).
func (d *Driver) AnnounceDeparture(ctx context.Context) {
	if err := d.PublishAnnouncement(ctx, true); err != nil {
		d.log.Warn("departure announcement", "err", err)
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(departureFlush):
	}
}

const departureFlush = 200 * time.Millisecond
