package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/supernode/capacity"
)

// verifyMega is the directory's check of every announcement that is not
// departing (directory.MegaVerifier). A mega announcement needs a valid
// mega-supernode certificate. In a certified network a supernode
// announcement needs a valid supernode certificate, carried in the same
// field, whose ceiling the directory clamps its capacity to; without one it
// is refused as uncertified. In an open network supernodes need nothing
// (and a certificate they carry is ignored).
func (n *Node) verifyMega(a protocol.Announcement, now time.Time) (protocol.MegaCert, error) {
	var c protocol.Cert
	var err error
	switch {
	case a.Role == protocol.RoleMega:
		c, err = protocol.VerifyMegaCert(a.MegaCert, n.trusted, a.ID, now, n.isRevoked)
	case !n.cfg.Certified():
		return protocol.Cert{}, nil
	case len(a.MegaCert) == 0:
		return protocol.Cert{}, protocol.Reject(protocol.ReasonUncertified, "supernode %s announced without a supernode certificate in a certified network", a.ID)
	default:
		c, err = protocol.VerifySupernodeCert(a.MegaCert, n.trusted, a.ID, now, n.isRevoked)
	}
	if err != nil {
		n.m.certRejected.WithLabelValues(string(protocol.ReasonOf(err))).Inc()
	}
	return c, err
}

func (n *Node) isRevoked(serial uint64) bool {
	n.megaMu.Lock()
	defer n.megaMu.Unlock()
	_, ok := n.revoked[serial]
	return ok
}

// MegaCert returns this node's certificate while it is a mega-supernode.
func (n *Node) MegaCert() (protocol.MegaCert, bool) {
	n.megaMu.Lock()
	defer n.megaMu.Unlock()
	if n.cert == nil {
		return protocol.MegaCert{}, false
	}
	return *n.cert, true
}

// SupernodeCert returns this node's supernode certificate, if it has one.
func (n *Node) SupernodeCert() (protocol.SupernodeCert, bool) {
	n.megaMu.Lock()
	defer n.megaMu.Unlock()
	if n.snCert == nil {
		return protocol.SupernodeCert{}, false
	}
	return *n.snCert, true
}

// regularCapacity is the capacity this node takes as a regular supernode:
// its configured capacity, at most its supernode certificate's ceiling.
func (n *Node) regularCapacity() int {
	if c, ok := n.SupernodeCert(); ok {
		return min(n.cfg.Capacity, int(c.Capacity))
	}
	return n.cfg.Capacity
}

// Promote makes this supernode a mega-supernode now: it verifies the
// certificate as its peers will (trusted operator key, this peer as the
// subject, valid now, not revoked), raises its capacity to the
// certificate's, and announces the new role at once. Attached clients stay.
// Given a supernode certificate instead, it installs that (see
// setSupernodeCert; an auto node need not be serving) and returns it.
func (n *Node) Promote(ctx context.Context, raw []byte) (protocol.MegaCert, error) {
	if n.admission == nil {
		return protocol.MegaCert{}, ErrNotSupernode
	}
	c, err := protocol.VerifyMegaCert(raw, n.trusted, n.ID(), n.now(), n.isRevoked)
	if protocol.ReasonOf(err) == protocol.CertWrongRole {
		return n.setSupernodeCert(ctx, raw, true)
	}
	if !n.serving.Load() {
		return protocol.MegaCert{}, ErrNotSupernode
	}
	if err != nil {
		return protocol.MegaCert{}, fmt.Errorf("promote: %w", err)
	}
	n.megaMu.Lock()
	n.cert, n.certRaw = &c, raw
	n.megaMu.Unlock()
	if err := n.sems.SetLimits(capacity.DefaultLimits(int(c.Capacity))); err != nil {
		return protocol.MegaCert{}, err
	}
	n.announcer.SetCert(raw)
	if err := n.announcer.SetRole(protocol.RoleMega, int(c.Capacity)); err != nil {
		return protocol.MegaCert{}, err
	}
	n.log.Info("promoted to mega-supernode", "serial", c.Serial, "capacity", c.Capacity, "until", c.NotAfter)
	if err := n.publishAnnouncement(ctx, false); err != nil {
		n.log.Warn("announce promotion", "err", err)
	}
	return c, nil
}

// Demote returns a mega-supernode to a regular supernode of its configured
// capacity. It announces the change at once, and hands the clients above
// that capacity back evenly over DrainPeriod (Detach with a spread, so they
// do not all move in the same second).
func (n *Node) Demote(ctx context.Context, why string) error {
	n.megaMu.Lock()
	if n.cert == nil {
		n.megaMu.Unlock()
		return errors.New("demote: this node is not a mega-supernode")
	}
	serial := n.cert.Serial
	n.cert, n.certRaw = nil, nil
	snRaw := n.snRaw
	n.megaMu.Unlock()
	regular := n.regularCapacity()
	if err := n.announcer.SetRole(protocol.RoleSupernode, regular); err != nil {
		return err
	}
	n.announcer.SetCert(snRaw)
	if err := n.sems.SetLimits(capacity.DefaultLimits(regular)); err != nil {
		return err
	}
	n.log.Info("demoted to supernode", "serial", serial, "why", why, "drain", n.cfg.DrainPeriod)
	if err := n.publishAnnouncement(ctx, false); err != nil {
		n.log.Warn("announce demotion", "err", err)
	}
	n.goLoop(func() { n.handBack(n.runCtx, n.cfg.DrainPeriod) })
	return nil
}

// handBack detaches the clients above the regular capacity in ten even
// steps over period; each Detach spreads its client's move over one step.
func (n *Node) handBack(ctx context.Context, period time.Duration) {
	n.drainTo(ctx, period, n.regularCapacity(), "mega-supernode handing back", nil)
}

// setSupernodeCert verifies a supernode certificate as this node's peers
// will and makes this node's announcements carry it (a mega-supernode
// carries its mega certificate until it is demoted). Its regular capacity
// becomes at most the certificate's ceiling. With announce, a regular
// supernode announces at once.
func (n *Node) setSupernodeCert(ctx context.Context, raw []byte, announce bool) (protocol.SupernodeCert, error) {
	if !n.cfg.Certified() {
		return protocol.SupernodeCert{}, fmt.Errorf("supernode certificate: this node runs an open network (--network-mode open or no --operator-pubkey), where supernodes need none")
	}
	c, err := protocol.VerifySupernodeCert(raw, n.trusted, n.ID(), n.now(), n.isRevoked)
	if err != nil {
		return protocol.SupernodeCert{}, fmt.Errorf("supernode certificate: %w", err)
	}
	n.megaMu.Lock()
	n.snCert, n.snRaw = &c, raw
	mega := n.cert != nil
	n.megaMu.Unlock()
	if int(c.Capacity) < n.cfg.Capacity {
		n.log.Warn("capacity above the supernode certificate's ceiling: taking the ceiling", "capacity", n.cfg.Capacity, "ceiling", c.Capacity)
	}
	n.log.Info("supernode certificate", "serial", c.Serial, "ceiling", c.Capacity, "until", c.NotAfter)
	if mega {
		return c, nil
	}
	n.announcer.SetCert(raw)
	if n.cfg.Role == RoleSupernode {
		regular := n.regularCapacity()
		if err := n.sems.SetLimits(capacity.DefaultLimits(regular)); err != nil {
			return protocol.SupernodeCert{}, err
		}
		if err := n.announcer.SetRole(protocol.RoleSupernode, regular); err != nil {
			return protocol.SupernodeCert{}, err
		}
	}
	if announce && n.serving.Load() {
		if err := n.publishAnnouncement(ctx, false); err != nil {
			n.log.Warn("announce supernode certificate", "err", err)
		}
	}
	return c, nil
}

// megaLoop demotes this node when its certificate expires or is revoked,
// re-publishes the revocations submitted here, and keeps the
// mega-supernodes of the directory on the resource manager's allowlist.
func (n *Node) megaLoop(ctx context.Context) {
	changes, cancel := n.dir.Subscribe()
	defer cancel()
	t := time.NewTicker(max(n.cfg.AnnounceInterval/4, 50*time.Millisecond))
	defer t.Stop()
	repub := time.NewTicker(n.cfg.AnnounceInterval)
	defer repub.Stop()
	allowed := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-changes:
			n.allowMegas(allowed)
		case <-repub.C:
			n.republishRevocations(ctx)
		case <-t.C:
			n.checkSupernodeCert()
			if c, ok := n.MegaCert(); ok {
				now := n.now()
				switch {
				case now.After(c.NotAfter):
					_ = n.Demote(ctx, "certificate expired")
				case n.isRevoked(c.Serial):
					_ = n.Demote(ctx, "certificate revoked")
				}
			}
		}
	}
}

// checkSupernodeCert drops this node's supernode certificate once it has
// expired or been revoked, and says so: peers refuse its announcements from
// then on, until a new certificate comes (overlayd promote).
func (n *Node) checkSupernodeCert() {
	c, ok := n.SupernodeCert()
	if !ok {
		return
	}
	why := ""
	switch {
	case n.now().After(c.NotAfter.Add(protocol.ClockSkew)):
		why = "expired"
	case n.isRevoked(c.Serial):
		why = "revoked"
	default:
		return
	}
	n.megaMu.Lock()
	if n.snCert == nil || n.snCert.Serial != c.Serial {
		n.megaMu.Unlock()
		return
	}
	n.snCert, n.snRaw = nil, nil
	mega := n.cert != nil
	n.megaMu.Unlock()
	if !mega {
		n.announcer.SetCert(nil)
	}
	n.log.Error("supernode certificate "+why+": peers of this certified network now refuse this node's announcements", "serial", c.Serial)
}

// allowMegas puts the verified mega-supernodes' addresses on the resource
// manager's allowlist, so a saturated node still accepts their connections.
func (n *Node) allowMegas(allowed map[string]bool) {
	al := rcmgr.GetAllowlist(n.rm)
	if al == nil {
		return
	}
	for _, e := range n.dir.Snapshot().Entries {
		if e.Cert == nil {
			continue
		}
		for _, a := range e.Addrs {
			ip, err := manet.ToIP(a)
			if err != nil {
				continue
			}
			proto := "ip4"
			if ip.To4() == nil {
				proto = "ip6"
			}
			m, err := ma.NewMultiaddr(fmt.Sprintf("/%s/%s/p2p/%s", proto, ip, e.ID))
			if err != nil || allowed[m.String()] {
				continue
			}
			if al.Add(m) == nil {
				allowed[m.String()] = true
			}
		}
	}
}

// startRevocations joins the revocation topic: valid revocations (signed
// by a trusted operator key) are remembered until the revoked certificate
// would have expired and remove its holder from the directory.
func (n *Node) startRevocations(ctx context.Context) error {
	err := n.ps.RegisterTopicValidator(protocol.RevocationTopic, func(_ context.Context, _ peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
		r, err := protocol.VerifyRevocation(msg.GetData(), n.trusted)
		if err != nil {
			n.m.certRejected.WithLabelValues(string(protocol.ReasonOf(err))).Inc()
			return pubsub.ValidationReject
		}
		n.applyRevocation(r)
		return pubsub.ValidationAccept
	}, pubsub.WithValidatorInline(true))
	if err != nil {
		return err
	}
	if n.revTopic, err = n.ps.Join(protocol.RevocationTopic); err != nil {
		return err
	}
	sub, err := n.revTopic.Subscribe()
	if err != nil {
		return err
	}
	n.goLoop(func() {
		defer sub.Cancel()
		for {
			if _, err := sub.Next(ctx); err != nil {
				return
			}
		}
	})
	return nil
}

func (n *Node) applyRevocation(r protocol.Revocation) {
	n.megaMu.Lock()
	_, known := n.revoked[r.Serial]
	n.revoked[r.Serial] = r.NotAfter
	for s, until := range n.revoked {
		if n.now().After(until.Add(protocol.ClockSkew)) {
			delete(n.revoked, s)
		}
	}
	n.megaMu.Unlock()
	if !known {
		n.log.Info("certificate revoked", "serial", r.Serial)
	}
	n.dir.Revoke(r.Serial)
}

// Revoke applies a revocation here and spreads it to the network; this
// node re-publishes it every announce interval until the revoked
// certificate would have expired, so nodes that join later learn it too.
func (n *Node) Revoke(ctx context.Context, raw []byte) (protocol.Revocation, error) {
	r, err := protocol.VerifyRevocation(raw, n.trusted)
	if err != nil {
		return r, fmt.Errorf("revoke: %w", err)
	}
	n.applyRevocation(r)
	n.megaMu.Lock()
	n.ownRevs = append(n.ownRevs, raw)
	n.megaMu.Unlock()
	return r, n.revTopic.Publish(ctx, raw)
}

func (n *Node) republishRevocations(ctx context.Context) {
	n.megaMu.Lock()
	var keep [][]byte
	for _, raw := range n.ownRevs {
		if r, err := protocol.VerifyRevocation(raw, n.trusted); err == nil && n.now().Before(r.NotAfter.Add(protocol.ClockSkew)) {
			keep = append(keep, raw)
		}
	}
	n.ownRevs = keep
	n.megaMu.Unlock()
	for _, raw := range keep {
		_ = n.revTopic.Publish(ctx, raw)
	}
}

// loadMegaCert installs --supernode-cert and promotes from --mega-cert at
// start. In a certified network a supernode without a supernode
// certificate is refused by its peers: it starts, and says so.
func (n *Node) loadMegaCert(ctx context.Context) error {
	if n.cfg.SupernodeCert != "" {
		raw, err := readCertFile(n.cfg.SupernodeCert)
		if err == nil {
			_, err = n.setSupernodeCert(ctx, raw, false)
		}
		if err != nil {
			return &ConfigError{Field: "--supernode-cert", Value: n.cfg.SupernodeCert, Err: err}
		}
	} else if n.cfg.Certified() {
		n.log.Warn("certified network and no --supernode-cert: peers refuse this node's announcements as a regular supernode until `overlayd promote` gives it a supernode certificate")
	}
	if n.cfg.MegaCert == "" {
		return nil
	}
	b, err := os.ReadFile(n.cfg.MegaCert)
	if err != nil {
		return &ConfigError{Field: "--mega-cert", Value: n.cfg.MegaCert, Err: err}
	}
	raw, err := protocol.DecodeBlob(string(b))
	if err != nil {
		return &ConfigError{Field: "--mega-cert", Value: n.cfg.MegaCert, Err: err}
	}
	if _, err := n.Promote(ctx, raw); err != nil {
		return &ConfigError{Field: "--mega-cert", Value: n.cfg.MegaCert, Err: err}
	}
	return nil
}

// readCertFile reads a certificate file in its text form.
func readCertFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return protocol.DecodeBlob(string(b))
}
