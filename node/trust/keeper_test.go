package trust

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/protocol"
)

// fakeRole records what a Keeper does to the supernode role, one string
// per call.
type fakeRole struct {
	mu    sync.Mutex
	calls []string
	fail  error // SetRole's answer
}

var _ Role = (*fakeRole)(nil)

func (r *fakeRole) add(s string) {
	r.mu.Lock()
	r.calls = append(r.calls, s)
	r.mu.Unlock()
}

func (r *fakeRole) SetRole(role protocol.Role, c int) error {
	r.add(fmt.Sprintf("role %v %d", role, c))
	return r.fail
}

func (r *fakeRole) SetCert(raw []byte) {
	if raw == nil {
		r.add("cert none")
		return
	}
	r.add("cert " + string(raw[len(raw)-4:]))
}

func (r *fakeRole) Announce(context.Context) error {
	r.add("announce")
	return nil
}

// take returns the calls so far and forgets them.
func (r *fakeRole) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

// fakeAllowlist records the addresses added, and signals each on ch.
type fakeAllowlist struct {
	mu    sync.Mutex
	added []string
	ch    chan string
}

func (a *fakeAllowlist) Add(m ma.Multiaddr) error {
	a.mu.Lock()
	a.added = append(a.added, m.String())
	a.mu.Unlock()
	select {
	case a.ch <- m.String():
	default:
	}
	return nil
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// rig is a Keeper with fakes around it: an operator key, a directory
// that verifies with the Keeper, the role, the clock, and what was
// refused, demoted and published.
type rig struct {
	k        *Keeper
	op       crypto.PrivKey
	self     peer.ID
	dir      *directory.Directory
	role     *fakeRole
	clock    *clock
	al       *fakeAllowlist
	serving  bool
	mu       sync.Mutex
	rejected []protocol.Reason
	demoted  chan struct{}
	sent     [][]byte
}

func newKey(t testing.TB) (crypto.PrivKey, peer.ID) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return k, id
}

// newRig returns a rig of a serving supernode of capacity 10; tweak may
// change its Config.
func newRig(t testing.TB, tweak func(*Config)) *rig {
	t.Helper()
	op, _ := newKey(t)
	_, self := newKey(t)
	r := &rig{op: op, self: self, role: &fakeRole{}, clock: &clock{t: time.Unix(1_800_000_000, 0)},
		al: &fakeAllowlist{ch: make(chan string, 8)}, serving: true, demoted: make(chan struct{}, 8)}
	cfg := Config{
		Self: self, Trusted: []crypto.PubKey{op.GetPublic()}, Capacity: 10, Pinned: true,
		Interval: time.Second, Role: r.role,
		Serving:  func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.serving },
		Demoted:  func() { r.demoted <- struct{}{} },
		Rejected: func(why protocol.Reason) { r.mu.Lock(); r.rejected = append(r.rejected, why); r.mu.Unlock() },
		Now:      r.clock.Now, Log: slog.New(slog.DiscardHandler), Allowlist: r.al,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	r.dir = directory.New(directory.WithMegaVerifier(func(a protocol.Announcement, now time.Time) (protocol.MegaCert, error) {
		return r.k.Verify(a, now)
	}))
	cfg.Directory = r.dir
	k, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	k.publish = func(_ context.Context, raw []byte) error {
		r.mu.Lock()
		r.sent = append(r.sent, raw)
		r.mu.Unlock()
		return nil
	}
	r.k = k
	return r
}

func (r *rig) refused() []protocol.Reason {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.rejected)
}

// megaCert is a mega certificate of the rig's operator for id, valid
// for an hour from the rig's now.
func (r *rig) megaCert(t testing.TB, id peer.ID, capacity uint32, serial uint64) []byte {
	t.Helper()
	now := r.clock.Now()
	b, err := protocol.SealMegaCert(protocol.MegaCert{Subject: id, Capacity: capacity, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), Serial: serial}, r.op)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// snCert is a supernode certificate of the rig's operator for id.
func (r *rig) snCert(t testing.TB, id peer.ID, ceiling uint32, serial uint64) []byte {
	t.Helper()
	now := r.clock.Now()
	b, err := protocol.SealSupernodeCert(protocol.SupernodeCert{Subject: id, Capacity: ceiling, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), Serial: serial}, r.op)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (r *rig) revocation(t testing.TB, serial uint64, notAfter time.Time) []byte {
	t.Helper()
	b, err := protocol.SealRevocation(serial, r.clock.Now(), notAfter, r.op)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// announce applies an announcement of id (signed by id) to the rig's
// directory, and returns the directory's verdict.
func (r *rig) announce(id peer.ID, role protocol.Role, capacity uint32, cert []byte, seq uint64) error {
	a := protocol.Announcement{ID: id, Addrs: []ma.Multiaddr{ma.StringCast("/ip4/10.0.0.1/tcp/4001")}, Role: role,
		Capacity: capacity, Version: protocol.Version, Seq: seq, Interval: time.Second, Issued: r.clock.Now(), MegaCert: cert}
	_, err := r.dir.Apply(id, a, r.clock.Now())
	return err
}

// TestVerify: what an announcement needs by its role and the network's
// mode, and that every refusal is counted by its reason.
func TestVerify(t *testing.T) {
	tests := []struct {
		name      string
		certified bool
		role      protocol.Role
		cert      func(r *rig, k crypto.PrivKey, id peer.ID) []byte
		want      protocol.Reason // "" accepted
		capacity  uint32          // the directory's capacity for the entry
	}{
		{"mega with its certificate", false, protocol.RoleMega, func(r *rig, _ crypto.PrivKey, id peer.ID) []byte { return r.megaCert(t, id, 500, 1) }, "", 1000},
		{"mega without a certificate", false, protocol.RoleMega, func(*rig, crypto.PrivKey, peer.ID) []byte { return nil }, protocol.CertMalformed, 0},
		{"mega with another peer's certificate", false, protocol.RoleMega, func(r *rig, _ crypto.PrivKey, _ peer.ID) []byte { return r.megaCert(t, r.self, 500, 1) }, protocol.CertWrongSubject, 0},
		{"mega with a self-signed certificate", false, protocol.RoleMega, func(_ *rig, k crypto.PrivKey, _ peer.ID) []byte { return selfSigned(t, k) }, protocol.CertSelfSigned, 0},
		{"mega with a supernode certificate", false, protocol.RoleMega, func(r *rig, _ crypto.PrivKey, id peer.ID) []byte { return r.snCert(t, id, 500, 1) }, protocol.CertWrongRole, 0},
		{"open: supernode without a certificate", false, protocol.RoleSupernode, func(*rig, crypto.PrivKey, peer.ID) []byte { return nil }, "", 1000},
		{"open: a supernode's certificate is ignored", false, protocol.RoleSupernode, func(r *rig, _ crypto.PrivKey, id peer.ID) []byte { return r.snCert(t, id, 5, 1) }, "", 1000},
		{"certified: supernode without a certificate", true, protocol.RoleSupernode, func(*rig, crypto.PrivKey, peer.ID) []byte { return nil }, protocol.ReasonUncertified, 0},
		{"certified: supernode clamped to its ceiling", true, protocol.RoleSupernode, func(r *rig, _ crypto.PrivKey, id peer.ID) []byte { return r.snCert(t, id, 5, 1) }, "", 5},
		{"certified: supernode with another's certificate", true, protocol.RoleSupernode, func(r *rig, _ crypto.PrivKey, _ peer.ID) []byte { return r.snCert(t, r.self, 5, 1) }, protocol.CertWrongSubject, 0},
		{"certified: supernode with a mega certificate", true, protocol.RoleSupernode, func(r *rig, _ crypto.PrivKey, id peer.ID) []byte { return r.megaCert(t, id, 5, 1) }, protocol.CertWrongRole, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, func(c *Config) { c.Certified = tt.certified })
			key, id := newKey(t)
			err := r.announce(id, tt.role, 1000, tt.cert(r, key, id), 1)
			if got := protocol.ReasonOf(err); got != tt.want {
				t.Fatalf("verdict %q (%v), want %q", got, err, tt.want)
			}
			e, ok := r.dir.Snapshot().Get(id)
			if tt.want != "" {
				// A missing certificate is the directory's refusal, not a
				// certificate's: counted there, not here.
				counted := []protocol.Reason{tt.want}
				if tt.want == protocol.ReasonUncertified {
					counted = nil
				}
				if ok || !slices.Equal(r.refused(), counted) {
					t.Fatalf("refused: entry %v, counted %v", ok, r.refused())
				}
				return
			}
			if !ok || e.Capacity != tt.capacity || len(r.refused()) != 0 {
				t.Fatalf("entry %v capacity %d, counted %v; want capacity %d", ok, e.Capacity, r.refused(), tt.capacity)
			}
		})
	}
}

// selfSigned is a mega certificate for the peer of k, signed by k.
func selfSigned(t testing.TB, k crypto.PrivKey) []byte {
	t.Helper()
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return signedBy(t, k, id)
}

// signedBy is a mega certificate for id signed by k.
func signedBy(t testing.TB, k crypto.PrivKey, id peer.ID) []byte {
	t.Helper()
	b, err := protocol.SealMegaCert(protocol.MegaCert{Subject: id, Capacity: 1, NotBefore: time.Unix(0, 0), NotAfter: time.Unix(4_000_000_000, 0), Serial: 9}, k)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPromoteDemote: a promotion verifies the certificate, takes its
// capacity and announces at once; a demotion returns to the regular
// capacity with the supernode certificate, announces, and hands back.
func TestPromoteDemote(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Certified = true })
	ctx := t.Context()
	sn := r.snCert(t, r.self, 8, 1)
	if _, err := r.k.SetSupernodeCert(ctx, sn, false); err != nil {
		t.Fatal(err)
	}
	if got, want := r.role.take(), []string{"cert " + string(sn[len(sn)-4:]), "role supernode 8"}; !slices.Equal(got, want) {
		t.Fatalf("supernode certificate: %q, want %q", got, want)
	}
	if r.k.RegularCapacity() != 8 {
		t.Fatalf("regular capacity %d, want the ceiling 8", r.k.RegularCapacity())
	}

	// Refused: another peer's certificate, an untrusted key, a node not serving.
	_, someone := newKey(t)
	if _, err := r.k.Promote(ctx, r.megaCert(t, someone, 100, 2)); protocol.ReasonOf(err) != protocol.CertWrongSubject {
		t.Fatalf("another peer's certificate: %v", err)
	}
	stranger, _ := newKey(t)
	if _, err := r.k.Promote(ctx, signedBy(t, stranger, r.self)); protocol.ReasonOf(err) != protocol.CertUntrusted {
		t.Fatalf("untrusted key: %v", err)
	}
	r.mu.Lock()
	r.serving = false
	r.mu.Unlock()
	if _, err := r.k.Promote(ctx, r.megaCert(t, r.self, 100, 2)); !errors.Is(err, ErrNotServing) {
		t.Fatalf("not serving: %v", err)
	}
	r.mu.Lock()
	r.serving = true
	r.mu.Unlock()
	if calls := r.role.take(); len(calls) != 0 {
		t.Fatalf("refused promotions changed the role: %q", calls)
	}

	raw := r.megaCert(t, r.self, 100, 2)
	c, err := r.k.Promote(ctx, raw)
	if err != nil || c.Capacity != 100 || c.Serial != 2 {
		t.Fatalf("promote: %+v, %v", c, err)
	}
	if got, want := r.role.take(), []string{"cert " + string(raw[len(raw)-4:]), "role mega 100", "announce"}; !slices.Equal(got, want) {
		t.Fatalf("promotion: %q, want %q", got, want)
	}
	if m, ok := r.k.MegaCert(); !ok || m.Serial != 2 {
		t.Fatalf("MegaCert %+v %v", m, ok)
	}
	// A new supernode certificate while mega: kept for later, not announced.
	sn2 := r.snCert(t, r.self, 6, 3)
	if _, err := r.k.Promote(ctx, sn2); err != nil {
		t.Fatal(err)
	}
	if calls := r.role.take(); len(calls) != 0 {
		t.Fatalf("a mega changed its announcement for a supernode certificate: %q", calls)
	}

	if err := r.k.Demote(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if got, want := r.role.take(), []string{"role supernode 6", "cert " + string(sn2[len(sn2)-4:]), "announce"}; !slices.Equal(got, want) {
		t.Fatalf("demotion: %q, want %q", got, want)
	}
	select {
	case <-r.demoted:
	default:
		t.Fatal("no hand-back after the demotion")
	}
	if _, ok := r.k.MegaCert(); ok {
		t.Fatal("still mega")
	}
	if err := r.k.Demote(ctx, "again"); !errors.Is(err, ErrNotMega) {
		t.Fatalf("demote twice: %v", err)
	}
}

// TestSupernodeCert: an open network takes none; an auto node (not
// pinned) only carries it; the ceiling above the capacity leaves the
// capacity; a failing role change is an error.
func TestSupernodeCert(t *testing.T) {
	ctx := t.Context()
	open := newRig(t, nil)
	if _, err := open.k.Promote(ctx, open.snCert(t, open.self, 5, 1)); err == nil || !strings.Contains(err.Error(), "open network") {
		t.Fatalf("open network: %v", err)
	}

	auto := newRig(t, func(c *Config) { c.Certified, c.Pinned = true, false })
	raw := auto.snCert(t, auto.self, 50, 1)
	if _, err := auto.k.Promote(ctx, raw); err != nil {
		t.Fatal(err)
	}
	if got, want := auto.role.take(), []string{"cert " + string(raw[len(raw)-4:]), "announce"}; !slices.Equal(got, want) {
		t.Fatalf("auto node: %q, want %q", got, want)
	}
	if auto.k.RegularCapacity() != 10 || !slices.Equal(auto.k.SignedSupernodeCert(), raw) {
		t.Fatalf("regular capacity %d (want 10, below the ceiling)", auto.k.RegularCapacity())
	}

	bad := newRig(t, func(c *Config) { c.Certified = true })
	_, someone := newKey(t)
	bad.role.fail = errors.New("boom")
	if _, err := bad.k.SetSupernodeCert(ctx, bad.snCert(t, bad.self, 5, 1), true); err == nil {
		t.Fatal("a failing role change was not an error")
	}
	if _, err := bad.k.SetSupernodeCert(ctx, bad.snCert(t, someone, 5, 1), true); protocol.ReasonOf(err) != protocol.CertWrongSubject {
		t.Fatalf("another's certificate: %v", err)
	}
}

// TestCheck: an expired or revoked certificate of this node is dropped:
// a mega is demoted, a supernode certificate leaves the announcements
// (but not a mega's, which carries its mega certificate).
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(r *rig, serial uint64)
	}{
		{"expired", func(r *rig, _ uint64) { r.clock.add(time.Hour + protocol.ClockSkew + time.Second) }},
		{"revoked", func(r *rig, serial uint64) {
			if !r.k.receive(r.revocation(t, serial, r.clock.Now().Add(time.Hour))) {
				t.Fatal("revocation refused")
			}
		}},
	} {
		t.Run("supernode "+tc.name, func(t *testing.T) {
			r := newRig(t, func(c *Config) { c.Certified = true })
			if _, err := r.k.SetSupernodeCert(t.Context(), r.snCert(t, r.self, 5, 7), false); err != nil {
				t.Fatal(err)
			}
			r.role.take()
			r.k.check(t.Context())
			if _, ok := r.k.SupernodeCert(); !ok {
				t.Fatal("a valid certificate was dropped")
			}
			tc.end(r, 7)
			r.k.check(t.Context())
			if _, ok := r.k.SupernodeCert(); ok || r.k.SignedSupernodeCert() != nil {
				t.Fatal("certificate kept")
			}
			if got := r.role.take(); !slices.Equal(got, []string{"cert none"}) {
				t.Fatalf("role calls %q, want the certificate removed", got)
			}
		})
		t.Run("mega "+tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			if _, err := r.k.Promote(t.Context(), r.megaCert(t, r.self, 100, 8)); err != nil {
				t.Fatal(err)
			}
			r.role.take()
			tc.end(r, 8)
			r.k.check(t.Context())
			if _, ok := r.k.MegaCert(); ok {
				t.Fatal("still mega")
			}
			if got, want := r.role.take(), []string{"role supernode 10", "cert none", "announce"}; !slices.Equal(got, want) {
				t.Fatalf("role calls %q, want %q", got, want)
			}
			if len(r.demoted) != 1 {
				t.Fatal("no hand-back")
			}
		})
	}
}

// TestRevocations: a revocation removes the certificate's holder from
// the directory and refuses the certificate from then on; one submitted
// here is published, and re-published until moot; a revocation of an
// untrusted key is refused and counted.
func TestRevocations(t *testing.T) {
	r := newRig(t, nil)
	ctx := t.Context()
	_, mega := newKey(t)
	cert := r.megaCert(t, mega, 100, 42)
	if err := r.announce(mega, protocol.RoleMega, 100, cert, 1); err != nil {
		t.Fatal(err)
	}
	rev := r.revocation(t, 42, r.clock.Now().Add(time.Hour))
	if got, err := r.k.Revoke(ctx, rev); err != nil || got.Serial != 42 {
		t.Fatalf("revoke: %+v, %v", got, err)
	}
	if _, ok := r.dir.Snapshot().Get(mega); ok || !r.k.Revoked(42) {
		t.Fatal("the revoked mega is still in the directory")
	}
	if err := r.announce(mega, protocol.RoleMega, 100, cert, 2); protocol.ReasonOf(err) != protocol.CertRevoked {
		t.Fatalf("revoked certificate announced again: %v", err)
	}
	// A second, short-lived revocation; both are re-published until moot.
	if _, err := r.k.Revoke(ctx, r.revocation(t, 43, r.clock.Now().Add(time.Minute))); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.sent = nil
	r.mu.Unlock()
	r.k.republish(ctx)
	if len(r.sent) != 2 {
		t.Fatalf("re-published %d, want 2", len(r.sent))
	}
	r.clock.add(2*time.Minute + protocol.ClockSkew)
	r.mu.Lock()
	r.sent = nil
	r.mu.Unlock()
	r.k.republish(ctx)
	if len(r.sent) != 1 || !slices.Equal(r.sent[0], rev) {
		t.Fatalf("re-published %d after the short one's end, want the long one", len(r.sent))
	}
	// A revocation heard later forgets the moot ones.
	if !r.k.receive(r.revocation(t, 44, r.clock.Now().Add(time.Hour))) {
		t.Fatal("revocation refused")
	}
	if r.k.Revoked(43) || !r.k.Revoked(42) || !r.k.Revoked(44) {
		t.Fatal("moot revocation kept, or a live one forgotten")
	}

	other, _ := newKey(t)
	forged, err := protocol.SealRevocation(44, r.clock.Now(), r.clock.Now().Add(time.Hour), other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.k.Revoke(ctx, forged); protocol.ReasonOf(err) != protocol.CertUntrusted {
		t.Fatalf("untrusted revocation: %v", err)
	}
	if r.k.receive(forged) || !slices.Equal(r.refused(), []protocol.Reason{protocol.CertRevoked, protocol.CertUntrusted}) {
		t.Fatalf("forged revocation taken, or not counted: %v", r.refused())
	}

	unjoined := newRig(t, nil)
	unjoined.k.publish = nil
	if _, err := unjoined.k.Revoke(ctx, unjoined.revocation(t, 1, time.Now())); !errors.Is(err, errNoTopic) {
		t.Fatalf("revoke before JoinRevocations: %v", err)
	}
}

// TestAllowMegas: the verified megas' IP addresses go on the allowlist,
// once each; regular supernodes do not.
func TestAllowMegas(t *testing.T) {
	r := newRig(t, nil)
	_, mega := newKey(t)
	_, regular := newKey(t)
	if err := r.announce(mega, protocol.RoleMega, 100, r.megaCert(t, mega, 100, 1), 1); err != nil {
		t.Fatal(err)
	}
	if err := r.announce(regular, protocol.RoleSupernode, 100, nil, 1); err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{}
	r.k.allowMegas(allowed)
	r.k.allowMegas(allowed)
	want := []string{"/ip4/10.0.0.1/p2p/" + mega.String()}
	if !slices.Equal(r.al.added, want) {
		t.Fatalf("allowlist %q, want %q", r.al.added, want)
	}
	// Without an allowlist, nothing to do.
	none := newRig(t, func(c *Config) { c.Allowlist = nil })
	none.k.allowMegas(map[string]bool{})
}

// TestMegaAddrs: one allowlist entry per IP address of a mega, IPv6
// included; addresses without an IP are skipped.
func TestMegaAddrs(t *testing.T) {
	_, id := newKey(t)
	c := protocol.MegaCert{Serial: 1}
	snap := &directory.Snapshot{Entries: []directory.Entry{{
		Announcement: protocol.Announcement{ID: id, Addrs: []ma.Multiaddr{
			ma.StringCast("/ip4/192.0.2.1/tcp/1"), ma.StringCast("/ip6/2001:db8::1/udp/1/quic-v1"), ma.StringCast("/dns4/example.com/tcp/1"),
		}},
		Cert: &c,
	}}}
	var got []string
	for _, m := range megaAddrs(snap) {
		got = append(got, m.String())
	}
	want := []string{"/ip4/192.0.2.1/p2p/" + id.String(), "/ip6/2001:db8::1/p2p/" + id.String()}
	if !slices.Equal(got, want) {
		t.Fatalf("megaAddrs %q, want %q", got, want)
	}
}

// TestRun: the loop demotes an expired mega on its own, allows a mega
// that joins the directory, and returns when its context ends.
func TestRun(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Interval = 100 * time.Millisecond })
	if _, err := r.k.Promote(t.Context(), r.megaCert(t, r.self, 100, 1)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); r.k.Run(ctx) }()
	r.clock.add(2 * time.Hour)
	select {
	case <-r.demoted:
	case <-time.After(10 * time.Second):
		t.Fatal("the expired mega was not demoted")
	}
	// The loop runs, so it is subscribed to the directory: a mega joins.
	_, mega := newKey(t)
	if err := r.announce(mega, protocol.RoleMega, 100, r.megaCert(t, mega, 100, 2), 1); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-r.al.ch:
		if want := "/ip4/10.0.0.1/p2p/" + mega.String(); got != want {
			t.Fatalf("allowed %s, want %s", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the new mega was not allowed")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}

func TestNewNeedsConfig(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("New took an empty Config")
	}
	r := newRig(t, nil)
	cfg := r.k.cfg
	cfg.Interval = 0
	if _, err := New(cfg); err == nil {
		t.Fatal("New took a zero interval")
	}
}

func TestReadCertFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.cert")
	if err := os.WriteFile(good, []byte(protocol.EncodeBlob([]byte("cert"))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadCertFile(good); err != nil || string(b) != "cert" {
		t.Fatalf("read %q, %v", b, err)
	}
	bad := filepath.Join(dir, "bad.cert")
	if err := os.WriteFile(bad, []byte("not base64 !"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCertFile(bad); err == nil {
		t.Fatal("read a file that is no certificate")
	}
	if _, err := ReadCertFile(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("read a missing file")
	}
}
