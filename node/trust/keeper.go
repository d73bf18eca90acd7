package trust

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/protocol"
)

// Role is the node's supernode role as its certificates change it. The
// node implements it over its announcer and its capacity semaphores. Its
// methods are called without the Keeper's lock held.
type Role interface {
	// SetRole makes the node serve as role with capacity attached peers:
	// its semaphores and its later announcements.
	SetRole(role protocol.Role, capacity int) error
	// SetCert sets the certificate the node's later announcements carry
	// (nil: none).
	SetCert(raw []byte)
	// Announce publishes the node's announcement at once.
	Announce(ctx context.Context) error
}

// Directory is what the Keeper uses of the node's directory.
type Directory interface {
	// Subscribe signals changes (see directory.Directory.Subscribe).
	Subscribe() (<-chan struct{}, func())
	// Snapshot is the directory now.
	Snapshot() *directory.Snapshot
	// Revoke removes the holder of a revoked certificate.
	Revoke(serial uint64) []directory.Event
}

// Allowlist is the resource manager's allowlist (go-libp2p
// rcmgr.Allowlist): the addresses it accepts connections from whatever
// its limits.
type Allowlist interface {
	Add(ma.Multiaddr) error
}

var _ Directory = (*directory.Directory)(nil)

// Config is what a Keeper needs of its node. Every field but Allowlist is
// required.
type Config struct {
	// Self is the node's peer ID: the subject of its own certificates.
	Self peer.ID
	// Trusted are the operator keys whose certificates and revocations
	// count (--operator-pubkey).
	Trusted []crypto.PubKey
	// Certified is a certified network (--network-mode certified): a
	// regular supernode needs a supernode certificate.
	Certified bool
	// Capacity is the node's configured capacity (--capacity); its
	// supernode certificate's ceiling lowers it.
	Capacity int
	// Pinned is a --role supernode node: a supernode certificate resizes it
	// at once (an auto node takes its capacity when it promotes itself).
	Pinned bool
	// Interval is the node's announce interval: Run checks this node's
	// certificates four times an interval (at least every 50 ms) and
	// re-publishes its own revocations once an interval.
	Interval time.Duration
	// Role is the node's supernode role; it is used only while the node
	// serves (Serving) or holds a mega certificate.
	Role Role
	// Serving reports whether the node plays the supernode role now.
	Serving func() bool
	// Demoted is called after a demotion (Demote, or an expired or revoked
	// mega certificate): the node hands the clients above its regular
	// capacity (RegularCapacity) back to other supernodes. It must not
	// block.
	Demoted   func()
	Directory Directory
	// Allowlist receives the verified mega-supernodes' addresses; nil:
	// the node has none.
	Allowlist Allowlist
	// Rejected counts a refused certificate or revocation, by reason.
	Rejected func(protocol.Reason)
	Now      func() time.Time
	Log      *slog.Logger
}

// Keeper holds a node's trust: the revocations it knows, its own
// certificates and the ones submitted to it. Its methods are safe for
// concurrent use.
type Keeper struct {
	cfg Config
	// Set by JoinRevocations; read-only afterwards. publish sends a
	// revocation on the topic (a test sets its own).
	sub     *pubsub.Subscription
	publish func(ctx context.Context, raw []byte) error

	mu      sync.Mutex
	revoked map[uint64]time.Time // serial → until
	mega    *protocol.MegaCert   // this node's, while it is mega
	megaRaw []byte
	sn      *protocol.SupernodeCert // this node's supernode certificate (certified network)
	snRaw   []byte
	own     [][]byte // revocations submitted here, re-published until moot
}

// New returns a Keeper of cfg. It does no I/O and starts nothing.
func New(cfg Config) (*Keeper, error) {
	if cfg.Role == nil || cfg.Serving == nil || cfg.Demoted == nil || cfg.Directory == nil ||
		cfg.Rejected == nil || cfg.Now == nil || cfg.Log == nil {
		return nil, errors.New("trust: Config needs Role, Serving, Demoted, Directory, Rejected, Now and Log")
	}
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("trust: announce interval %v", cfg.Interval)
	}
	return &Keeper{cfg: cfg, revoked: map[uint64]time.Time{}}, nil
}

// Verify is the directory's check of every announcement that is not
// departing (directory.MegaVerifier). A mega announcement needs a valid
// mega-supernode certificate. In a certified network a supernode
// announcement needs a valid supernode certificate, carried in the same
// field, whose ceiling the directory clamps its capacity to; without one
// it is refused as uncertified. In an open network supernodes need
// nothing (and a certificate they carry is ignored). A refused
// certificate is counted (Config.Rejected); a missing one is the
// directory's refusal to count.
func (k *Keeper) Verify(a protocol.Announcement, now time.Time) (protocol.MegaCert, error) {
	var c protocol.Cert
	var err error
	switch {
	case a.Role == protocol.RoleMega:
		c, err = protocol.VerifyMegaCert(a.MegaCert, k.cfg.Trusted, a.ID, now, k.Revoked)
	case !k.cfg.Certified:
		return protocol.Cert{}, nil
	case len(a.MegaCert) == 0:
		return protocol.Cert{}, protocol.Reject(protocol.ReasonUncertified, "supernode %s announced without a supernode certificate in a certified network", a.ID)
	default:
		c, err = protocol.VerifySupernodeCert(a.MegaCert, k.cfg.Trusted, a.ID, now, k.Revoked)
	}
	if err != nil {
		k.cfg.Rejected(protocol.ReasonOf(err))
	}
	return c, err
}

// Revoked reports whether the certificate serial is revoked.
func (k *Keeper) Revoked(serial uint64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.revoked[serial]
	return ok
}

// MegaCert returns this node's certificate while it is a mega-supernode.
func (k *Keeper) MegaCert() (protocol.MegaCert, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.mega == nil {
		return protocol.MegaCert{}, false
	}
	return *k.mega, true
}

// SupernodeCert returns this node's supernode certificate, if it has one.
func (k *Keeper) SupernodeCert() (protocol.SupernodeCert, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.sn == nil {
		return protocol.SupernodeCert{}, false
	}
	return *k.sn, true
}

// SignedSupernodeCert returns this node's supernode certificate as the
// operator signed it (nil if it has none): what its announcements carry
// while it is not a mega-supernode.
func (k *Keeper) SignedSupernodeCert() []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.snRaw
}

// RegularCapacity is the capacity this node takes as a regular supernode:
// its configured capacity, at most its supernode certificate's ceiling.
func (k *Keeper) RegularCapacity() int {
	if c, ok := k.SupernodeCert(); ok {
		return min(k.cfg.Capacity, int(c.Capacity))
	}
	return k.cfg.Capacity
}

// Promote makes this supernode a mega-supernode now: it verifies the
// certificate as its peers will (trusted operator key, this peer as the
// subject, valid now, not revoked), raises its capacity to the
// certificate's, and announces the new role at once. Attached clients
// stay. Given a supernode certificate instead, it installs that
// (SetSupernodeCert, announcing; the node need not be serving) and returns
// it. A node that does not serve gets ErrNotServing.
func (k *Keeper) Promote(ctx context.Context, raw []byte) (protocol.MegaCert, error) {
	c, err := protocol.VerifyMegaCert(raw, k.cfg.Trusted, k.cfg.Self, k.cfg.Now(), k.Revoked)
	if protocol.ReasonOf(err) == protocol.CertWrongRole {
		return k.SetSupernodeCert(ctx, raw, true)
	}
	if !k.cfg.Serving() {
		return protocol.MegaCert{}, ErrNotServing
	}
	if err != nil {
		return protocol.MegaCert{}, fmt.Errorf("promote: %w", err)
	}
	k.mu.Lock()
	k.mega, k.megaRaw = &c, raw
	k.mu.Unlock()
	k.cfg.Role.SetCert(raw)
	if err := k.cfg.Role.SetRole(protocol.RoleMega, int(c.Capacity)); err != nil {
		return protocol.MegaCert{}, err
	}
	k.cfg.Log.Info("promoted to mega-supernode", "serial", c.Serial, "capacity", c.Capacity, "until", c.NotAfter)
	if err := k.cfg.Role.Announce(ctx); err != nil {
		k.cfg.Log.Warn("announce promotion", "err", err)
	}
	return c, nil
}

// Demote returns a mega-supernode to a regular supernode of its regular
// capacity (RegularCapacity), carrying its supernode certificate if it has
// one. It announces the change at once, then calls Config.Demoted, which
// hands the clients above that capacity back.
func (k *Keeper) Demote(ctx context.Context, why string) error {
	k.mu.Lock()
	if k.mega == nil {
		k.mu.Unlock()
		return fmt.Errorf("demote: %w", ErrNotMega)
	}
	serial := k.mega.Serial
	k.mega, k.megaRaw = nil, nil
	snRaw := k.snRaw
	k.mu.Unlock()
	regular := k.RegularCapacity()
	if err := k.cfg.Role.SetRole(protocol.RoleSupernode, regular); err != nil {
		return err
	}
	k.cfg.Role.SetCert(snRaw)
	k.cfg.Log.Info("demoted to supernode", "serial", serial, "why", why, "capacity", regular)
	if err := k.cfg.Role.Announce(ctx); err != nil {
		k.cfg.Log.Warn("announce demotion", "err", err)
	}
	k.cfg.Demoted()
	return nil
}

// SetSupernodeCert verifies a supernode certificate as this node's peers
// will and makes this node's announcements carry it (a mega-supernode
// carries its mega certificate until it is demoted). Its regular capacity
// becomes at most the certificate's ceiling; a pinned supernode takes it
// at once. With announce, a serving regular supernode announces at once.
func (k *Keeper) SetSupernodeCert(ctx context.Context, raw []byte, announce bool) (protocol.SupernodeCert, error) {
	if !k.cfg.Certified {
		return protocol.SupernodeCert{}, errors.New("supernode certificate: this node runs an open network (--network-mode open or no --operator-pubkey), where supernodes need none")
	}
	c, err := protocol.VerifySupernodeCert(raw, k.cfg.Trusted, k.cfg.Self, k.cfg.Now(), k.Revoked)
	if err != nil {
		return protocol.SupernodeCert{}, fmt.Errorf("supernode certificate: %w", err)
	}
	k.mu.Lock()
	k.sn, k.snRaw = &c, raw
	mega := k.mega != nil
	k.mu.Unlock()
	if int(c.Capacity) < k.cfg.Capacity {
		k.cfg.Log.Warn("capacity above the supernode certificate's ceiling: taking the ceiling", "capacity", k.cfg.Capacity, "ceiling", c.Capacity)
	}
	k.cfg.Log.Info("supernode certificate", "serial", c.Serial, "ceiling", c.Capacity, "until", c.NotAfter)
	if mega {
		return c, nil
	}
	k.cfg.Role.SetCert(raw)
	if k.cfg.Pinned {
		if err := k.cfg.Role.SetRole(protocol.RoleSupernode, k.RegularCapacity()); err != nil {
			return protocol.SupernodeCert{}, err
		}
	}
	if announce && k.cfg.Serving() {
		if err := k.cfg.Role.Announce(ctx); err != nil {
			k.cfg.Log.Warn("announce supernode certificate", "err", err)
		}
	}
	return c, nil
}

// check demotes this node when its mega certificate has expired or been
// revoked, and drops its supernode certificate in the same cases.
func (k *Keeper) check(ctx context.Context) {
	k.checkSupernodeCert()
	if c, ok := k.MegaCert(); ok {
		switch {
		case k.cfg.Now().After(c.NotAfter):
			_ = k.Demote(ctx, "certificate expired")
		case k.Revoked(c.Serial):
			_ = k.Demote(ctx, "certificate revoked")
		}
	}
}

// checkSupernodeCert drops this node's supernode certificate once it has
// expired or been revoked, and says so: peers refuse its announcements
// from then on, until a new certificate comes (overlayd promote).
func (k *Keeper) checkSupernodeCert() {
	c, ok := k.SupernodeCert()
	if !ok {
		return
	}
	why := ""
	switch {
	case k.cfg.Now().After(c.NotAfter.Add(protocol.ClockSkew)):
		why = "expired"
	case k.Revoked(c.Serial):
		why = "revoked"
	default:
		return
	}
	k.mu.Lock()
	if k.sn == nil || k.sn.Serial != c.Serial {
		k.mu.Unlock()
		return
	}
	k.sn, k.snRaw = nil, nil
	mega := k.mega != nil
	k.mu.Unlock()
	if !mega {
		k.cfg.Role.SetCert(nil)
	}
	k.cfg.Log.Error("supernode certificate "+why+": peers of this certified network now refuse this node's announcements", "serial", c.Serial)
}

// ReadCertFile reads a certificate file in its text form
// (protocol.EncodeBlob, as overlayd operator writes it).
func ReadCertFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return protocol.DecodeBlob(string(b))
}
