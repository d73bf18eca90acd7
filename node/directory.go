package node

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/protocol"
)

// gossipParams returns GossipSub parameters for the overlay's topology: an
// ordinary node is connected to few peers (its supernodes), so a supernode
// is the hub of a star. With the default Dhi (12) a hub prunes its mesh to D
// and most leaves only hear gossip, late or never (measured: 57-64% of
// leaves after 6 s). A Dhi above the number of peers a hub can hold keeps
// every leaf in its mesh, so announcements reach every node directly.
func gossipParams(c Config) pubsub.GossipSubParams {
	p := pubsub.DefaultGossipSubParams()
	p.D, p.Dlo = 8, 6
	p.Dhi = max(4096, 2*connBudget(c))
	p.Dscore = 4
	p.Dout = 2
	// Heartbeats repair the mesh; keep them well inside an announce
	// interval so a new peer is in the mesh before the next announcement.
	p.HeartbeatInterval = min(max(c.AnnounceInterval/4, 100*time.Millisecond), time.Second)
	p.HeartbeatInitialDelay = min(p.HeartbeatInitialDelay, p.HeartbeatInterval)
	return p
}

// Peer scoring. The only per-topic component is P4, invalid messages:
// a message the validator Rejects counts against the peer that sent it
// (squared, decaying). In a star the components that reward delivery
// (P2, P3 mesh deliveries) would punish every leaf, which forwards
// nothing, so they are off. P6 (IP colocation) penalises more than
// colocationThreshold peers on one IP; loopback, and private addresses on
// a local network, are exempt, since an in-process testnet puts every node
// on 127.0.0.1. Every peer starts at invalidTolerance (the application
// score), so one or two rejected messages in a decay window (a peer of
// another version, a bug) cost nothing visible: GossipSub prunes a peer
// from its mesh as soon as its score is below 0, and a leaf whose hub
// pruned it hears nothing. The third takes a peer below 0 (pruned, no
// gossip), the fourth below graylistThreshold, after which its messages
// are dropped before validation.
const (
	invalidTolerance    = 50.0
	invalidWeight       = -10.0
	gossipThreshold     = -20.0
	publishThreshold    = -50.0
	graylistThreshold   = -100.0
	colocationThreshold = 8
)

// scoreParams returns the GossipSub peer-score parameters and thresholds
// (see the constants above).
func scoreParams(c Config, localNet bool) (*pubsub.PeerScoreParams, *pubsub.PeerScoreThresholds) {
	decay := max(time.Second, c.AnnounceInterval)
	// Scores decay to a tenth over 10 announce intervals.
	decayTo := func(over time.Duration) float64 { return pubsub.ScoreParameterDecayWithBase(over, decay, 0.1) }
	whitelist := []*net.IPNet{
		{IP: net.IPv4(127, 0, 0, 0), Mask: net.CIDRMask(8, 32)},
		{IP: net.IPv6loopback, Mask: net.CIDRMask(128, 128)},
	}
	if localNet {
		for _, cidr := range []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7", "169.254.0.0/16", "fe80::/10"} {
			_, n, _ := net.ParseCIDR(cidr)
			whitelist = append(whitelist, n)
		}
	}
	p := &pubsub.PeerScoreParams{
		SkipAtomicValidation: true,
		Topics: map[string]*pubsub.TopicScoreParams{
			protocol.DirectoryTopic: {
				SkipAtomicValidation:           true,
				TopicWeight:                    1,
				TimeInMeshQuantum:              time.Second, // unused (weight 0), but divided by
				InvalidMessageDeliveriesWeight: invalidWeight,
				InvalidMessageDeliveriesDecay:  decayTo(10 * c.AnnounceInterval),
			},
		},
		AppSpecificScore:            func(peer.ID) float64 { return invalidTolerance },
		AppSpecificWeight:           1,
		IPColocationFactorWeight:    -10,
		IPColocationFactorThreshold: colocationThreshold,
		IPColocationFactorWhitelist: whitelist,
		BehaviourPenaltyWeight:      -1,
		BehaviourPenaltyThreshold:   6,
		BehaviourPenaltyDecay:       decayTo(10 * c.AnnounceInterval),
		DecayInterval:               decay,
		DecayToZero:                 0.01,
		RetainScore:                 10 * c.AnnounceInterval,
	}
	t := &pubsub.PeerScoreThresholds{
		SkipAtomicValidation: true,
		GossipThreshold:      gossipThreshold,
		PublishThreshold:     publishThreshold,
		GraylistThreshold:    graylistThreshold,
	}
	return p, t
}

func (n *Node) startDirectory(ctx context.Context) error {
	n.dir.SetLimits(directory.DefaultLimits(n.cfg.AnnounceInterval))
	if n.usesView() {
		// Entries come from views, a few at a time, each with the
		// interval its supernode announces at (which grows with the tier,
		// protocol.AnnounceInterval); the view's next refresh drops any
		// the server stopped naming, so no clamp to this node's own.
		n.dir.SetLimits(directory.Limits{})
	}
	sp, st := scoreParams(n.cfg, cluster.LocalOnly(n.host.Addrs()))
	ps, err := pubsub.NewGossipSub(ctx, n.host,
		pubsub.WithMessageSigning(true),
		pubsub.WithStrictSignatureVerification(true),
		pubsub.WithFloodPublish(true),
		pubsub.WithGossipSubParams(gossipParams(n.cfg)),
		pubsub.WithPeerScore(sp, st),
	)
	if err != nil {
		return err
	}
	n.ps = ps
	n.host.Network().Notify(&network.NotifyBundle{DisconnectedF: n.unprotectDeparted})
	if n.usesView() {
		// An ordinary node does not hear the announcement topic: it keeps
		// a partial view (view.go). GossipSub still carries revocations.
		return nil
	}
	if err := ps.RegisterTopicValidator(protocol.DirectoryTopic, n.validate, pubsub.WithValidatorInline(true)); err != nil {
		return err
	}
	if n.topic, err = ps.Join(protocol.DirectoryTopic); err != nil {
		return err
	}
	if n.sub, err = n.topic.Subscribe(); err != nil {
		return err
	}
	n.heardSince = n.now()
	n.goLoop(func() { n.drain(ctx) })
	return nil
}

// meshTag is the tag under which GossipSub's tag tracer protects the
// directory topic's mesh peers in the connection manager.
const meshTag = "pubsub:" + protocol.DirectoryTopic

// unprotectDeparted lifts the connection manager's protection of a peer
// whose last connection closed. GossipSub protects every mesh peer and
// lifts it on PRUNE, but not when the peer disconnects (go-libp2p-pubsub
// v0.19: the tag tracer's OnClosedOutboundStream does nothing), so without
// this a supernode keeps one entry per distinct client it ever had in its
// mesh: memory that grows with every surge of new peers. A peer that comes
// back is protected again when it is grafted.
func (n *Node) unprotectDeparted(nw network.Network, c network.Conn) {
	p := c.RemotePeer()
	if nw.Connectedness(p) != network.Connected {
		n.host.ConnManager().Unprotect(p, meshTag)
	}
}

// validate is the directory topic's validator: it charges the signer's and
// the forwarding peer's rate limits, then applies the announcement to the
// directory, so only accepted ones propagate. A refusal Rejects (and
// counts against the forwarder's GossipSub score) only when the message is
// wrong for every receiver (ignoredReason); otherwise it is Ignored.
func (n *Node) validate(_ context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	signer := msg.GetFrom()
	now := n.now()
	n.m.announceBytes.Add(float64(proto.Size(msg.Message)))
	if from == n.host.ID() {
		from = ""
	}
	err := n.dir.Admit(from, signer, now)
	var ev directory.Event
	if err == nil {
		ev, err = n.dir.Receive(signer, msg.GetData(), n.signedForView(msg), now)
	}
	if err != nil {
		reason := protocol.ReasonOf(err)
		n.m.rejected.WithLabelValues(string(reason)).Inc()
		n.log.Debug("announcement refused", "from", signer.ShortString(), "err", err)
		if ignoredReason(reason) {
			return pubsub.ValidationIgnore
		}
		return pubsub.ValidationReject
	}
	n.m.accepted.Inc()
	if ev.Kind != directory.Updated {
		n.log.Debug("directory", "event", ev.Kind.String(), "peer", ev.ID.ShortString())
	}
	return pubsub.ValidationAccept
}

// signedForView is the message as its signer signed it, kept with the
// entry so that this node can serve it in partial views (overlay/view);
// nil on a node that never serves views (a pinned ordinary node).
func (n *Node) signedForView(msg *pubsub.Message) []byte {
	if n.cfg.Role == RoleOrdinary || msg.Message == nil {
		return nil
	}
	b, err := proto.Marshal(msg.Message)
	if err != nil {
		return nil
	}
	return b
}

// ignoredReason reports whether a refusal for reason depends on the
// receiver (its clock, its table sizes, its trusted keys, what it has seen)
// rather than on the message: then the forwarder is not penalised, since
// the same message may be valid where it came from. stale_seq: reordering
// on the way is not an attack; rate_limited: excess is dropped, not held
// against the path.
func ignoredReason(r protocol.Reason) bool {
	switch r {
	case protocol.ReasonStaleSeq, protocol.ReasonDirectoryFull, protocol.ReasonRateLimited,
		protocol.ReasonExpired, protocol.ReasonFuture,
		protocol.CertUntrusted, protocol.CertRevoked, protocol.CertExpired, protocol.CertNotYetValid:
		return true
	}
	return false
}

// drain reads the subscription; the validator has done the work already.
func (n *Node) drain(ctx context.Context) {
	for {
		if _, err := n.sub.Next(ctx); err != nil {
			return
		}
	}
}

// expiryTick is how often a node looks for expired entries: a tenth of the
// announce interval, within [10 ms, 1 s].
func expiryTick(interval time.Duration) time.Duration {
	return min(max(interval/10, 10*time.Millisecond), time.Second)
}

// tierInterval is the interval the supernode tier announces at, by this
// node's directory: the configured one, stretched for a large tier
// (protocol.AnnounceInterval).
func (n *Node) tierInterval() time.Duration {
	return protocol.AnnounceInterval(n.cfg.AnnounceInterval, n.dir.Snapshot().Len())
}

// settleIntervals is how many of the tier's announce intervals a node
// hears the announcement topic before its directory counts as settled:
// every live supernode announces once an interval, and the second is
// margin for gossip and for an announcer whose timer had just fired when
// this node subscribed.
const settleIntervals = 2

// directorySettled reports whether this node has heard the announcement
// topic for settleIntervals of the tier's interval, so that its directory
// holds the live supernodes and its ring is the network's. A supernode
// takes no group home role before (supernode.RouterConfig.Settled): just
// started, its ring holds a few supernodes, at first itself alone.
func (n *Node) directorySettled() bool {
	return !n.heardSince.IsZero() && !n.now().Before(n.heardSince.Add(settleIntervals*n.tierInterval()))
}

// expireLoop removes entries whose supernodes stopped announcing. On a
// node that hears the topic it also keeps the directory's limits at the
// tier's interval: announcements of a large tier come less often and
// live longer (protocol.AnnounceInterval), and the clamp and the rate
// limits follow.
func (n *Node) expireLoop(ctx context.Context) {
	t := time.NewTicker(expiryTick(n.cfg.AnnounceInterval))
	defer t.Stop()
	limited := n.cfg.AnnounceInterval
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if iv := n.tierInterval(); !n.usesView() && iv != limited {
				limited = iv
				n.dir.SetLimits(directory.DefaultLimits(iv))
				n.log.Info("announce interval follows the tier", "interval", iv, "supernodes", n.dir.Snapshot().Len())
			}
			for _, ev := range n.dir.Expire(n.now()) {
				n.log.Info("supernode expired", "peer", ev.ID.ShortString())
			}
		}
	}
}

// announceAddrs are the addresses a supernode announces: the configured
// announce addresses, else its listen addresses without loopback ones unless
// it has nothing else.
func (n *Node) announceAddrs() []ma.Multiaddr {
	if len(n.cfg.AnnounceAddrs) > 0 {
		addrs, _ := parseAddrs("--announce-addr", n.cfg.AnnounceAddrs)
		return addrs
	}
	all := n.host.Addrs()
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

func (n *Node) publishAnnouncement(ctx context.Context, departing bool) error {
	b, err := n.announcer.Next(n.announceAddrs(), n.load(), departing, n.now())
	if err != nil {
		return err
	}
	return n.topic.Publish(ctx, b)
}

// load is the number of attached clients reported in announcements.
func (n *Node) load() int {
	if n.admission == nil {
		return 0
	}
	return n.admission.Load()
}

// announceLoop publishes this supernode's announcement now and then on
// the announceSchedule.
func (n *Node) announceLoop(ctx context.Context) {
	sched := newAnnounceSchedule(n.cfg.AnnounceInterval, rand.New(rand.NewPCG(n.seed(), n.seed())))
	next := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
		iv := n.tierInterval()
		if err := n.announcer.SetInterval(iv); err != nil {
			n.log.Warn("announce interval", "err", err)
		}
		if err := n.publishAnnouncement(ctx, false); err != nil && ctx.Err() == nil {
			n.log.Warn("announce", "err", err)
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

// announceDeparture tells the network this supernode stops serving, and
// gives the message a moment to leave before the host closes (GossipSub has
// no flush).
func (n *Node) announceDeparture(ctx context.Context) {
	if err := n.publishAnnouncement(ctx, true); err != nil {
		n.log.Warn("departure announcement", "err", err)
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(departureFlush):
	}
}

const departureFlush = 200 * time.Millisecond

// bootstrapLoop keeps the node connected to at least one bootstrap peer,
// retrying with jittered exponential backoff while none is connected.
func (n *Node) bootstrapLoop(ctx context.Context) {
	if len(n.bootstrap) == 0 {
		return
	}
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	wait := 250 * time.Millisecond
	for {
		connected := 0
		for _, pi := range n.bootstrap {
			if n.host.Network().Connectedness(pi.ID) == network.Connected {
				connected++
			}
		}
		// An ordinary node needs one bootstrap peer; a supernode keeps all
		// of them, so that two halves of a healed partition find each other
		// again (the supernode tier is a full mesh anyway).
		if connected == 0 || (n.serving.Load() && connected < len(n.bootstrap)) {
			for _, pi := range n.bootstrap {
				if pi.ID == n.host.ID() || n.host.Network().Connectedness(pi.ID) == network.Connected {
					continue
				}
				dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := n.host.Connect(dctx, pi)
				cancel()
				if err == nil {
					connected++
					n.log.Info("bootstrap connected", "peer", pi.ID.ShortString())
				} else if !errors.Is(err, context.Canceled) {
					n.log.Debug("bootstrap dial", "peer", pi.ID.ShortString(), "err", err)
				}
			}
		}
		if connected > 0 {
			wait = n.cfg.AnnounceInterval
		} else {
			wait = min(2*wait, time.Minute)
		}
		d := wait/2 + time.Duration(rng.Int64N(int64(wait/2)+1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// meshLoop keeps a supernode connected to every other supernode in its
// directory: the supernode tier is a full mesh, which carries the directory
// gossip (and, later, relayed messages) one hop between any two supernodes.
func (n *Node) meshLoop(ctx context.Context) {
	changes, cancel := n.dir.Subscribe()
	defer cancel()
	t := time.NewTicker(n.cfg.AnnounceInterval)
	defer t.Stop()
	for {
		for _, e := range n.dir.Snapshot().Entries {
			if e.ID == n.host.ID() || n.host.Network().Connectedness(e.ID) == network.Connected {
				continue
			}
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := n.host.Connect(dctx, peer.AddrInfo{ID: e.ID, Addrs: e.Addrs})
			cancel()
			if err != nil && ctx.Err() == nil {
				n.log.Debug("supernode dial", "peer", e.ID.ShortString(), "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case <-t.C:
		}
	}
}
