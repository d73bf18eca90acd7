package protocol

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/protocol/pb"
)

func newKey(tb testing.TB) (crypto.PrivKey, peer.ID) {
	tb.Helper()
	k, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	id, _ := peer.IDFromPublicKey(pub)
	return k, id
}

// otherDomainCert is a certificate record sealed under another domain.
type otherDomainCert struct{ certRecord }

func (*otherDomainCert) Domain() string { return "some-other-domain" }

func TestVerifyMegaCert(t *testing.T) {
	op, _ := newKey(t)
	stranger, _ := newKey(t)
	subjectKey, subject := newKey(t)
	_, other := newKey(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	trusted := []crypto.PubKey{op.GetPublic()}
	base := MegaCert{Subject: subject, Capacity: 1000, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), Serial: 7}
	seal := func(c MegaCert, k crypto.PrivKey) []byte {
		b, err := SealMegaCert(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	valid := seal(base, op)
	with := func(f func(c *MegaCert)) []byte { c := base; f(&c); return seal(c, op) }
	wrongDomain := func() []byte {
		rec := &otherDomainCert{certRecord{pb.MegaCertificate{Subject: []byte(subject), Role: pb.Role_ROLE_MEGA, Capacity: 10,
			NotBeforeUnix: base.NotBefore.Unix(), NotAfterUnix: base.NotAfter.Unix(), Serial: 9}}}
		env, err := record.Seal(rec, op)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := env.Marshal()
		return b
	}()
	tests := []struct {
		name    string
		cert    []byte
		subject peer.ID
		revoked uint64
		want    Reason
	}{
		{"valid", valid, subject, 0, ""},
		{"within clock skew before not-before", with(func(c *MegaCert) { c.NotBefore = now.Add(ClockSkew / 2) }), subject, 0, ""},
		{"self-signed", seal(base, subjectKey), subject, 0, CertSelfSigned},
		{"untrusted key", seal(base, stranger), subject, 0, CertUntrusted},
		{"another peer's certificate", valid, other, 0, CertWrongSubject},
		{"expired", with(func(c *MegaCert) { c.NotBefore, c.NotAfter = now.Add(-3*time.Hour), now.Add(-time.Hour) }), subject, 0, CertExpired},
		{"not yet valid", with(func(c *MegaCert) { c.NotBefore, c.NotAfter = now.Add(time.Hour), now.Add(2*time.Hour) }), subject, 0, CertNotYetValid},
		{"revoked", valid, subject, 7, CertRevoked},
		{"wrong envelope domain", wrongDomain, subject, 0, CertSignature},
		{"truncated", valid[:len(valid)/2], subject, 0, CertMalformed},
		{"oversize", make([]byte, MaxCertSize+1), subject, 0, CertOversize},
		{"garbage", []byte("not a certificate"), subject, 0, CertMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			revoked := func(s uint64) bool { return s == tt.revoked }
			c, err := VerifyMegaCert(tt.cert, trusted, tt.subject, now, revoked)
			if got := ReasonOf(err); got != tt.want {
				t.Fatalf("reason %q (err %v), want %q", got, err, tt.want)
			}
			if tt.want == "" && (c.Subject != subject || c.Capacity == 0) {
				t.Fatalf("cert %+v", c)
			}
		})
	}
}

func TestRevocation(t *testing.T) {
	op, _ := newKey(t)
	stranger, _ := newKey(t)
	now := time.Now()
	b, err := SealRevocation(42, now, now.Add(time.Hour), op)
	if err != nil {
		t.Fatal(err)
	}
	r, err := VerifyRevocation(b, []crypto.PubKey{op.GetPublic()})
	if err != nil || r.Serial != 42 {
		t.Fatalf("revocation: %+v %v", r, err)
	}
	if _, err := VerifyRevocation(b, []crypto.PubKey{stranger.GetPublic()}); ReasonOf(err) != CertUntrusted {
		t.Fatalf("untrusted revocation: %v", err)
	}
	// A certificate is not a revocation (different domain).
	_, subject := newKey(t)
	cert, _ := SealMegaCert(MegaCert{Subject: subject, Capacity: 1, NotBefore: now, NotAfter: now.Add(time.Hour), Serial: 1}, op)
	if _, err := VerifyRevocation(cert, []crypto.PubKey{op.GetPublic()}); err == nil {
		t.Fatal("a certificate verified as a revocation")
	}
}

func TestKeyEncoding(t *testing.T) {
	k, _ := newKey(t)
	s, err := EncodeKey(k.GetPublic())
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeKey(s)
	if err != nil || !back.Equals(k.GetPublic()) {
		t.Fatalf("round trip: %v", err)
	}
	for _, bad := range []string{"", "ed25519:", "ed25519:!!", "rsa:AAAA", "ed25519:AAAA"} {
		if _, err := DecodeKey(bad); err == nil {
			t.Errorf("DecodeKey(%q) accepted", bad)
		}
	}
}

func FuzzVerifyMegaCert(f *testing.F) {
	op, _ := newKey(f)
	_, subject := newKey(f)
	now := time.Now()
	b, _ := SealMegaCert(MegaCert{Subject: subject, Capacity: 5, NotBefore: now, NotAfter: now.Add(time.Hour), Serial: 3}, op)
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := VerifyMegaCert(data, []crypto.PubKey{op.GetPublic()}, subject, now, nil)
		if err != nil {
			if ReasonOf(err) == "" {
				t.Fatalf("error without reason: %v", err)
			}
			return
		}
		if c.Subject != subject || c.Capacity == 0 {
			t.Fatalf("accepted %+v", c)
		}
		_ = proto.Size
	})
}

// sealWithRole signs a payload of the given role in the envelope domain of
// rec's kind: a certificate that no operator tool produces.
func sealWithRole(tb testing.TB, rec certEnvelope, c Cert, role pb.Role, k crypto.PrivKey) []byte {
	tb.Helper()
	*rec.payload() = pb.MegaCertificate{Subject: []byte(c.Subject), Role: role, Capacity: c.Capacity,
		NotBeforeUnix: c.NotBefore.Unix(), NotAfterUnix: c.NotAfter.Unix(), Serial: c.Serial}
	env, err := record.Seal(rec, k)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := env.Marshal()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func TestVerifySupernodeCert(t *testing.T) {
	op, _ := newKey(t)
	stranger, _ := newKey(t)
	subjectKey, subject := newKey(t)
	_, other := newKey(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	trusted := []crypto.PubKey{op.GetPublic()}
	base := SupernodeCert{Subject: subject, Capacity: 40, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), Serial: 21}
	seal := func(c SupernodeCert, k crypto.PrivKey) []byte {
		b, err := SealSupernodeCert(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	valid := seal(base, op)
	with := func(f func(c *SupernodeCert)) []byte { c := base; f(&c); return seal(c, op) }
	mega, err := SealMegaCert(base, op)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cert    []byte
		subject peer.ID
		revoked uint64
		want    Reason
	}{
		{"valid", valid, subject, 0, ""},
		{"within clock skew after not-after", with(func(c *SupernodeCert) { c.NotAfter = now.Add(-ClockSkew / 2) }), subject, 0, ""},
		{"forged: self-signed", seal(base, subjectKey), subject, 0, CertSelfSigned},
		{"forged: untrusted key", seal(base, stranger), subject, 0, CertUntrusted},
		{"forged: altered after signing", flipLast(valid), subject, 0, CertSignature},
		{"wrong subject", valid, other, 0, CertWrongSubject},
		{"expired", with(func(c *SupernodeCert) { c.NotBefore, c.NotAfter = now.Add(-3*time.Hour), now.Add(-time.Hour) }), subject, 0, CertExpired},
		{"not yet valid", with(func(c *SupernodeCert) { c.NotBefore, c.NotAfter = now.Add(time.Hour), now.Add(2*time.Hour) }), subject, 0, CertNotYetValid},
		{"revoked", valid, subject, 21, CertRevoked},
		{"wrong role: a mega certificate", mega, subject, 0, CertWrongRole},
		{"mega role in a supernode envelope", sealWithRole(t, &supernodeCertRecord{}, base, pb.Role_ROLE_MEGA, op), subject, 0, CertMalformed},
		{"truncated", valid[:len(valid)/2], subject, 0, CertMalformed},
		{"oversize", make([]byte, MaxCertSize+1), subject, 0, CertOversize},
		{"empty", nil, subject, 0, CertMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			revoked := func(s uint64) bool { return s == tt.revoked }
			c, err := VerifySupernodeCert(tt.cert, trusted, tt.subject, now, revoked)
			if got := ReasonOf(err); got != tt.want {
				t.Fatalf("reason %q (err %v), want %q", got, err, tt.want)
			}
			if tt.want == "" && (c.Subject != subject || c.Capacity != 40 || c.Serial != 21) {
				t.Fatalf("cert %+v", c)
			}
		})
	}
	// The other way round: a supernode certificate does not make a mega,
	// and old mega certificates stay valid as they are.
	if _, err := VerifyMegaCert(valid, trusted, subject, now, nil); ReasonOf(err) != CertWrongRole {
		t.Fatalf("supernode certificate as a mega certificate: %v", err)
	}
	if _, err := VerifyMegaCert(mega, trusted, subject, now, nil); err != nil {
		t.Fatalf("mega certificate: %v", err)
	}
	if _, err := VerifyMegaCert(sealWithRole(t, &certRecord{}, base, pb.Role_ROLE_SUPERNODE, op), trusted, subject, now, nil); ReasonOf(err) != CertMalformed {
		t.Fatalf("supernode role in a mega envelope: %v", err)
	}
	// One revocation covers a serial whichever kind carries it.
	rev, err := SealRevocation(21, now, now.Add(time.Hour), op)
	if err != nil {
		t.Fatal(err)
	}
	r, err := VerifyRevocation(rev, trusted)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifySupernodeCert(valid, trusted, subject, now, func(s uint64) bool { return s == r.Serial }); ReasonOf(err) != CertRevoked {
		t.Fatalf("after revocation: %v", err)
	}
}

// flipLast returns b with its last byte changed (inside the signature).
func flipLast(b []byte) []byte {
	out := append([]byte(nil), b...)
	out[len(out)-1] ^= 0xff
	return out
}

func FuzzVerifySupernodeCert(f *testing.F) {
	op, _ := newKey(f)
	_, subject := newKey(f)
	now := time.Now()
	c := SupernodeCert{Subject: subject, Capacity: 5, NotBefore: now, NotAfter: now.Add(time.Hour), Serial: 3}
	b, _ := SealSupernodeCert(c, op)
	m, _ := SealMegaCert(c, op)
	f.Add(b)
	f.Add(m)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := VerifySupernodeCert(data, []crypto.PubKey{op.GetPublic()}, subject, now, nil)
		if err != nil {
			if ReasonOf(err) == "" {
				t.Fatalf("error without reason: %v", err)
			}
			return
		}
		if c.Subject != subject || c.Capacity == 0 || c.Serial == 0 {
			t.Fatalf("accepted %+v", c)
		}
	})
}
