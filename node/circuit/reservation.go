package circuit

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	relayclient "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	pbv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/pb"
	ma "github.com/multiformats/go-multiaddr"
)

// Client side of the relay: an ordinary node that is not publicly
// reachable keeps a reservation on the supernode it is attached to (its
// static relay), so that other peers can reach it at
// /p2p/<supernode>/p2p-circuit/p2p/<self>. It renews at half of the
// reservation's remaining time, moves the reservation when the attach
// client fails over or returns home, and forgets it on detach (circuit v2
// has no cancel message: the supernode drops it when the connection closes
// or it expires).

// Relay client timing.
const (
	// reserveTimeout bounds one reservation request.
	reserveTimeout = 10 * time.Second
	// reserveRetryBase and reserveRetryMax bound the jittered exponential
	// wait after a failed or refused reservation.
	reserveRetryBase = 500 * time.Millisecond
	reserveRetryMax  = 30 * time.Second
)

// Reservation is a reservation this node holds.
type Reservation struct {
	Relay          peer.ID
	Since, Expires time.Time
	Took           time.Duration // the request's round trip
	// Addrs are this node's relayed addresses through Relay, ending in
	// /p2p-circuit/p2p/<self>.
	Addrs []ma.Multiaddr
}

// reserver keeps the reservation. One goroutine (run) does the I/O; the
// attach client and the reachability watcher only set the target and kick.
type reserver struct {
	r     *Relay
	kickc chan struct{}
	rng   *rand.Rand // used by run only

	mu     sync.Mutex
	target peer.ID // the supernode attached to, "" while detached
	rsv    *Reservation
}

func newReserver(r *Relay) *reserver {
	return &reserver{r: r, kickc: make(chan struct{}, 1), rng: rand.New(rand.NewPCG(r.cfg.Seed, r.cfg.Seed))}
}

// Attached is the client's session hook (client.WithSessionHook), called
// when a session with supernode sn starts; the returned function is called
// when it ends. The reservation follows the session. It never blocks.
func (r *Relay) Attached(sn peer.ID) (detached func()) {
	c := r.client
	c.mu.Lock()
	c.target = sn
	c.mu.Unlock()
	c.kick()
	return func() {
		c.mu.Lock()
		if c.target == sn {
			c.target = ""
		}
		c.mu.Unlock()
		c.kick()
	}
}

// Kick makes the reservation client look again at once (the node's
// reachability changed).
func (r *Relay) Kick() { r.client.kick() }

func (c *reserver) kick() {
	select {
	case c.kickc <- struct{}{}:
	default:
	}
}

// current returns the reservation held, if any.
func (c *reserver) current() (Reservation, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rsv == nil {
		return Reservation{}, false
	}
	return *c.rsv, true
}

// Reservation returns the reservation this node holds, if any.
func (r *Relay) Reservation() (Reservation, bool) { return r.client.current() }

// Addrs returns this node's relayed addresses (empty while it holds no
// reservation).
func (r *Relay) Addrs() []ma.Multiaddr {
	rsv, ok := r.client.current()
	if !ok {
		return nil
	}
	return rsv.Addrs
}

// RunReservations keeps a reservation on the supernode attached to while
// the node is not public, until ctx ends.
func (r *Relay) RunReservations(ctx context.Context) { r.client.run(ctx) }

// run keeps the reservation in line with the target and the reachability
// until ctx ends.
func (c *reserver) run(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	failures := 0
	for {
		wait := c.step(ctx, &failures)
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-c.kickc:
		case <-t.C:
		}
	}
}

// step makes one decision and returns how long to wait before the next.
func (c *reserver) step(ctx context.Context, failures *int) time.Duration {
	cfg := c.r.cfg
	c.mu.Lock()
	want, cur := c.target, c.rsv
	c.mu.Unlock()
	if cfg.Reachability() == network.ReachabilityPublic {
		want = ""
	}
	now := cfg.Now()
	if cur != nil && (cur.Relay != want || !now.Before(cur.Expires)) {
		c.mu.Lock()
		c.rsv = nil
		c.mu.Unlock()
		cfg.Log.Info("relay reservation released", "relay", cur.Relay.ShortString())
		cur = nil
	}
	if want == "" {
		*failures = 0
		return time.Hour
	}
	if cur != nil {
		if renew := renewAt(cur.Since, cur.Expires); now.Before(renew) {
			return renew.Sub(now)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, reserveTimeout)
	t0 := cfg.Now()
	rsv, err := relayclient.Reserve(rctx, cfg.Host, peer.AddrInfo{ID: want})
	cancel()
	if ctx.Err() != nil {
		return time.Hour
	}
	if err != nil {
		*failures++
		result := "error"
		var re relayclient.ReservationError
		if errors.As(err, &re) && re.Status != pbv2.Status_CONNECTION_FAILED {
			result = "refused"
		}
		c.r.m.reserveAttempts.WithLabelValues(result).Inc()
		d := min(reserveRetryMax, reserveRetryBase<<min(*failures-1, 10))
		d = d/2 + time.Duration(c.rng.Int64N(int64(d/2)+1))
		// Warn once per streak: a refused client retries for as long as
		// it stays attached, and a testnet has hundreds.
		lvl := slog.LevelDebug
		if *failures == 1 {
			lvl = slog.LevelWarn
		}
		cfg.Log.Log(ctx, lvl, "relay reservation failed", "relay", want.ShortString(), "result", result, "err", err, "retry_in", d)
		return d
	}
	*failures = 0
	took := cfg.Now().Sub(t0)
	c.r.m.reserveAttempts.WithLabelValues("ok").Inc()
	c.r.m.reserveTime.Observe(took.Seconds())
	r := &Reservation{Relay: want, Since: cfg.Now(), Expires: rsv.Expiration, Took: took, Addrs: c.circuitAddrs(want, rsv.Addrs)}
	c.mu.Lock()
	stillWanted := c.target == want
	if stillWanted {
		c.rsv = r
	}
	c.mu.Unlock()
	if !stillWanted {
		return 0 // the target moved while we reserved
	}
	if cur == nil {
		cfg.Log.Info("relay reservation", "relay", want.ShortString(), "expires", r.Expires.Format(time.RFC3339), "took", took, "addrs", r.Addrs)
	} else {
		cfg.Log.Debug("relay reservation renewed", "relay", want.ShortString(), "expires", r.Expires.Format(time.RFC3339))
	}
	return renewAt(r.Since, r.Expires).Sub(cfg.Now())
}

// renewAt is when a reservation obtained at since and ending at expires is
// renewed: half way, at least a second after since.
func renewAt(since, expires time.Time) time.Time {
	return since.Add(max(expires.Sub(since)/2, time.Second))
}

// circuitAddrs builds this node's relayed addresses through relay: the
// addresses the reservation vouched for (public ones only), else the
// relay's known addresses; on private networks a reservation carries none.
func (c *reserver) circuitAddrs(relay peer.ID, vouched []ma.Multiaddr) []ma.Multiaddr {
	h := c.r.cfg.Host
	base := vouched
	if len(base) == 0 {
		base = h.Peerstore().Addrs(relay)
	}
	tail, err := ma.NewMultiaddr("/p2p/" + relay.String() + "/p2p-circuit/p2p/" + h.ID().String())
	if err != nil {
		return nil
	}
	var out []ma.Multiaddr
	for _, a := range base {
		if len(a) == 0 {
			continue
		}
		// Vouched addresses may end in /p2p/<relay> already.
		transport, _ := ma.SplitFunc(a, func(c ma.Component) bool { return c.Protocol().Code == ma.P_P2P })
		if len(transport) == 0 {
			continue
		}
		out = append(out, transport.Encapsulate(tail))
	}
	if len(out) == 0 {
		out = append(out, tail)
	}
	return out
}
