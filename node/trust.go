package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"

	"github.com/overlayd/overlayd/node/api"
	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/node/roledriver"
	"github.com/overlayd/overlayd/node/trust"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/supernode/capacity"
)

// The node's wiring of its operator trust (package node/trust): the
// keeper verifies the certificates of the directory's announcements
// (verifyMega), holds this node's own certificates and the revocations,
// and changes the supernode role through supernodeRole; the hand-back
// after a demotion is the node's (handBack, over roledriver.Drain).

var (
	_ trust.Role      = supernodeRole{}
	_ trust.Allowlist = (*rcmgr.Allowlist)(nil)
)

// newTrust builds the node's trust keeper. Start calls it once the host
// and the metrics exist, before the directory hears any announcement.
func (n *Node) newTrust() (*trust.Keeper, error) {
	trusted, _ := n.cfg.OperatorKeys()
	cfg := trust.Config{
		Self:      n.host.ID(),
		Trusted:   trusted,
		Certified: n.cfg.Certified(),
		Capacity:  n.cfg.Capacity,
		Pinned:    n.cfg.Role == config.RoleSupernode,
		Interval:  n.cfg.AnnounceInterval,
		Role:      supernodeRole{n},
		Serving:   n.serving.Load,
		Demoted:   func() { n.goLoop(func() { n.handBack(n.runCtx, n.cfg.DrainPeriod) }) },
		Directory: n.dir,
		Rejected:  n.m.trust.Rejected,
		Now:       n.now,
		Log:       n.base.With("component", "trust"),
	}
	if al := rcmgr.GetAllowlist(n.rm); al != nil {
		cfg.Allowlist = al
	}
	return trust.New(cfg)
}

// verifyMega is the directory's check of every announcement that is not
// departing (directory.MegaVerifier): trust.Keeper.Verify.
func (n *Node) verifyMega(a protocol.Announcement, now time.Time) (protocol.MegaCert, error) {
	if n.trust == nil {
		return protocol.Cert{}, protocol.Reject(protocol.CertUntrusted, "announcement from %s before the node started", a.ID)
	}
	return n.trust.Verify(a, now)
}

// supernodeRole is the node's supernode role as its certificates change
// it (trust.Role): the announcer and the semaphores of startSupernode.
type supernodeRole struct{ n *Node }

// SetRole resizes the semaphores and sets the announced role and capacity.
func (r supernodeRole) SetRole(role protocol.Role, c int) error {
	if r.n.sems == nil || r.n.announcer == nil {
		return api.ErrNotSupernode
	}
	if err := r.n.sems.SetLimits(capacity.DefaultLimits(c)); err != nil {
		return err
	}
	return r.n.announcer.SetRole(role, c)
}

// SetCert sets the certificate the announcements carry.
func (r supernodeRole) SetCert(raw []byte) {
	if r.n.announcer != nil {
		r.n.announcer.SetCert(raw)
	}
}

// Announce publishes the node's announcement now.
func (r supernodeRole) Announce(ctx context.Context) error {
	return r.n.dirs.PublishAnnouncement(ctx, false)
}

// MegaCert returns this node's certificate while it is a mega-supernode.
func (n *Node) MegaCert() (protocol.MegaCert, bool) {
	if n.trust == nil {
		return protocol.MegaCert{}, false
	}
	return n.trust.MegaCert()
}

// SupernodeCert returns this node's supernode certificate, if it has one.
func (n *Node) SupernodeCert() (protocol.SupernodeCert, bool) {
	if n.trust == nil {
		return protocol.SupernodeCert{}, false
	}
	return n.trust.SupernodeCert()
}

// Promote makes this supernode a mega-supernode now, or gives it a
// supernode certificate (trust.Keeper.Promote): the certificate is
// verified as its peers will, the capacity follows it, and the new role
// is announced at once. Attached clients stay. A node without the
// supernode role, or an auto node not serving given a mega certificate,
// gets api.ErrNotSupernode.
func (n *Node) Promote(ctx context.Context, raw []byte) (protocol.MegaCert, error) {
	if n.admission == nil || n.trust == nil {
		return protocol.MegaCert{}, api.ErrNotSupernode
	}
	c, err := n.trust.Promote(ctx, raw)
	if errors.Is(err, trust.ErrNotServing) {
		return protocol.MegaCert{}, api.ErrNotSupernode
	}
	return c, err
}

// Demote returns a mega-supernode to a regular supernode of its configured
// capacity (at most its supernode certificate's ceiling). It announces the
// change at once, and hands the clients above that capacity back evenly
// over DrainPeriod (Detach with a spread, so they do not all move in the
// same second).
func (n *Node) Demote(ctx context.Context, why string) error {
	if n.trust == nil {
		return fmt.Errorf("demote: %w", trust.ErrNotMega)
	}
	return n.trust.Demote(ctx, why)
}

// handBack detaches the clients above the regular capacity in ten even
// steps over period; each Detach spreads its client's move over one step.
func (n *Node) handBack(ctx context.Context, period time.Duration) {
	roledriver.Drain(ctx, n.admission, period, n.trust.RegularCapacity(), "mega-supernode handing back", nil, n.log)
}

// Revoke applies a revocation here and spreads it to the network; this
// node re-publishes it every announce interval until the revoked
// certificate would have expired, so nodes that join later learn it too.
func (n *Node) Revoke(ctx context.Context, raw []byte) (protocol.Revocation, error) {
	if n.trust == nil {
		return protocol.Revocation{}, errors.New("revoke: node not started")
	}
	return n.trust.Revoke(ctx, raw)
}

// loadMegaCert installs --supernode-cert and promotes from --mega-cert at
// start. In a certified network a supernode without a supernode
// certificate is refused by its peers: it starts, and says so.
func (n *Node) loadMegaCert(ctx context.Context) error {
	if n.cfg.SupernodeCert != "" {
		raw, err := trust.ReadCertFile(n.cfg.SupernodeCert)
		if err == nil {
			_, err = n.trust.SetSupernodeCert(ctx, raw, false)
		}
		if err != nil {
			return &config.Error{Field: "--supernode-cert", Value: n.cfg.SupernodeCert, Err: err}
		}
	} else if n.cfg.Certified() {
		n.log.Warn("certified network and no --supernode-cert: peers refuse this node's announcements as a regular supernode until `overlayd promote` gives it a supernode certificate")
	}
	if n.cfg.MegaCert == "" {
		return nil
	}
	raw, err := trust.ReadCertFile(n.cfg.MegaCert)
	if err == nil {
		_, err = n.Promote(ctx, raw)
	}
	if err != nil {
		return &config.Error{Field: "--mega-cert", Value: n.cfg.MegaCert, Err: err}
	}
	return nil
}
