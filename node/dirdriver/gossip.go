package dirdriver

import (
	"context"
	"net"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
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
	p.Dhi = max(4096, 2*c.ConnBudget)
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

// Join sets the directory's limits, starts the node's GossipSub router on
// the host (it runs until ctx ends) and, unless the node keeps a partial
// view, joins the announcement topic with the validator. Call it once,
// before Run; the node starts it before the directory can hear anything.
func (d *Driver) Join(ctx context.Context) error {
	d.cfg.Dir.SetLimits(directory.DefaultLimits(d.cfg.AnnounceInterval))
	if d.cfg.PartialView {
		// Entries come from views, a few at a time, each with the
		// interval its supernode announces at (which grows with the tier,
		// protocol.AnnounceInterval); the view's next refresh drops any
		// the server stopped naming, so no clamp to this node's own.
		d.cfg.Dir.SetLimits(directory.Limits{})
	}
	h := d.cfg.Host
	sp, st := scoreParams(d.cfg, cluster.LocalOnly(h.Addrs()))
	ps, err := pubsub.NewGossipSub(ctx, h,
		pubsub.WithMessageSigning(true),
		pubsub.WithStrictSignatureVerification(true),
		pubsub.WithFloodPublish(true),
		pubsub.WithGossipSubParams(gossipParams(d.cfg)),
		pubsub.WithPeerScore(sp, st),
	)
	if err != nil {
		return err
	}
	d.ps = ps
	h.Network().Notify(&network.NotifyBundle{DisconnectedF: d.unprotectDeparted})
	if d.cfg.PartialView {
		// An ordinary node does not hear the announcement topic: it keeps
		// a partial view (node/viewclient). GossipSub still carries
		// revocations.
		return nil
	}
	if err := ps.RegisterTopicValidator(protocol.DirectoryTopic, d.validate, pubsub.WithValidatorInline(true)); err != nil {
		return err
	}
	if d.topic, err = ps.Join(protocol.DirectoryTopic); err != nil {
		return err
	}
	if d.sub, err = d.topic.Subscribe(); err != nil {
		return err
	}
	d.heardSince = d.now()
	return nil
}

// MeshTag is the tag under which GossipSub's tag tracer protects the
// directory topic's mesh peers in the connection manager.
const MeshTag = "pubsub:" + protocol.DirectoryTopic

// unprotectDeparted lifts the connection manager's protection of a peer
// whose last connection closed. GossipSub protects every mesh peer and
// lifts it on PRUNE, but not when the peer disconnects (go-libp2p-pubsub
// v0.19: the tag tracer's OnClosedOutboundStream does nothing), so without
// this a supernode keeps one entry per distinct client it ever had in its
// mesh: memory that grows with every surge of new peers. A peer that comes
// back is protected again when it is grafted.
func (d *Driver) unprotectDeparted(nw network.Network, c network.Conn) {
	p := c.RemotePeer()
	if nw.Connectedness(p) != network.Connected {
		d.cfg.Host.ConnManager().Unprotect(p, MeshTag)
	}
}

// validate is the directory topic's validator: it charges the signer's and
// the forwarding peer's rate limits, then applies the announcement to the
// directory, so only accepted ones propagate. A refusal Rejects (and
// counts against the forwarder's GossipSub score) only when the message is
// wrong for every receiver (ignoredReason); otherwise it is Ignored.
func (d *Driver) validate(_ context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	signer := msg.GetFrom()
	now := d.now()
	d.m.announceBytes.Add(float64(proto.Size(msg.Message)))
	if from == d.cfg.Host.ID() {
		from = ""
	}
	err := d.cfg.Dir.Admit(from, signer, now)
	var ev directory.Event
	if err == nil {
		ev, err = d.cfg.Dir.Receive(signer, msg.GetData(), d.signedForView(msg), now)
	}
	if err != nil {
		reason := protocol.ReasonOf(err)
		d.m.rejected.WithLabelValues(string(reason)).Inc()
		d.log.Debug("announcement refused", "from", signer.ShortString(), "err", err)
		if ignoredReason(reason) {
			return pubsub.ValidationIgnore
		}
		return pubsub.ValidationReject
	}
	d.m.accepted.Inc()
	if ev.Kind != directory.Updated {
		d.log.Debug("directory", "event", ev.Kind.String(), "peer", ev.ID.ShortString())
	}
	return pubsub.ValidationAccept
}

// signedForView is the message as its signer signed it, kept with the
// entry so that this node can serve it in partial views (overlay/view);
// nil on a node that never serves views (a pinned ordinary node).
func (d *Driver) signedForView(msg *pubsub.Message) []byte {
	if !d.cfg.ServesViews || msg.Message == nil {
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
func (d *Driver) drain(ctx context.Context) {
	for {
		if _, err := d.sub.Next(ctx); err != nil {
			return
		}
	}
}
