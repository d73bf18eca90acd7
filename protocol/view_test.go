package protocol

import (
	"crypto/rand"
	"testing"
	"time"

	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// signDirectory signs data on DirectoryTopic as go-libp2p-pubsub's
// StrictSign does (node tests check OpenSigned against real GossipSub
// messages).
func signDirectory(tb testing.TB, priv crypto.PrivKey, data []byte, topic string) []byte {
	tb.Helper()
	id, err := peer.IDFromPrivateKey(priv)
	if err != nil {
		tb.Fatal(err)
	}
	m := &pubsubpb.Message{From: []byte(id), Data: data, Seqno: []byte{0, 0, 0, 0, 0, 0, 0, 1}, Topic: proto.String(topic)}
	b, err := proto.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	if m.Signature, err = priv.Sign(append([]byte(pubsubSignPrefix), b...)); err != nil {
		tb.Fatal(err)
	}
	out, err := proto.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

func signedAnnouncement(tb testing.TB) (crypto.PrivKey, []byte, []byte) {
	tb.Helper()
	priv, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	a := validAnnouncement(tb)
	if a.ID, err = peer.IDFromPrivateKey(priv); err != nil {
		tb.Fatal(err)
	}
	data, err := a.Marshal()
	if err != nil {
		tb.Fatal(err)
	}
	return priv, data, signDirectory(tb, priv, data, DirectoryTopic)
}

func TestOpenSigned(t *testing.T) {
	priv, data, signed := signedAnnouncement(t)
	id, _ := peer.IDFromPrivateKey(priv)
	signer, got, err := OpenSigned(signed)
	if err != nil || signer != id || string(got) != string(data) {
		t.Fatalf("OpenSigned = %s, %d bytes, %v; want %s and the data", signer, len(got), err, id)
	}
	// Another key may sign the same data: it opens, with that key as the
	// signer, and the directory refuses it as a signer mismatch
	// (overlay/directory's TestReceiveSigned).

	other, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	tamper := func(f func(m *pubsubpb.Message)) []byte {
		var m pubsubpb.Message
		if err := proto.Unmarshal(signed, &m); err != nil {
			t.Fatal(err)
		}
		f(&m)
		b, _ := proto.Marshal(&m)
		return b
	}
	otherID, _ := peer.IDFromPrivateKey(other)
	for _, tc := range []struct {
		what   string
		signed []byte
		want   Reason
	}{
		{"data changed (a server raising the capacity)", tamper(func(m *pubsubpb.Message) { m.Data = append(m.Data, 0x20, 0x01) }), ReasonBadSignature},
		{"another signer named", tamper(func(m *pubsubpb.Message) { m.From = []byte(otherID) }), ReasonBadSignature},
		{"signature cut", tamper(func(m *pubsubpb.Message) { m.Signature = m.Signature[:10] }), ReasonBadSignature},
		{"no signature", tamper(func(m *pubsubpb.Message) { m.Signature = nil }), ReasonBadSignature},
		{"seqno changed", tamper(func(m *pubsubpb.Message) { m.Seqno = []byte{9} }), ReasonBadSignature},
		{"another topic", signDirectory(t, priv, data, RevocationTopic), ReasonBadSignature},
		{"garbage", []byte{0xff, 0xff, 0xff}, ReasonUndecodable},
		{"oversize", make([]byte, MaxSignedAnnouncement+1), ReasonOversize},
		{"no data", signDirectory(t, priv, nil, DirectoryTopic), ReasonInvalid},
	} {
		if _, _, err := OpenSigned(tc.signed); ReasonOf(err) != tc.want {
			t.Errorf("%s: err %v (reason %q), want %q", tc.what, err, ReasonOf(err), tc.want)
		}
	}
}

func FuzzOpenSigned(f *testing.F) {
	_, _, signed := signedAnnouncement(f)
	f.Add(signed)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x00, 0x12, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		signer, data, err := OpenSigned(b)
		if err != nil {
			if ReasonOf(err) == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		// Only a message signed by its From verifies: the fuzzer cannot
		// forge one, so what opens is a (possibly re-encoded) copy of the
		// seed, signed by the seed's key.
		if signer == "" || len(data) == 0 {
			t.Fatalf("opened without a signer or data: %q, %d bytes", signer, len(data))
		}
	})
}

func TestAnnounceInterval(t *testing.T) {
	for _, tc := range []struct {
		base       time.Duration
		supernodes int
		want       time.Duration
	}{
		{10 * time.Second, 0, 10 * time.Second},
		{10 * time.Second, 1_000, 10 * time.Second},
		{10 * time.Second, 5_000, 50 * time.Second},
		{10 * time.Second, 60_000, MaxAnnounceInterval},
		{10 * time.Second, 100_000, MaxAnnounceInterval},
		{300 * time.Millisecond, 20, 300 * time.Millisecond},
		{300 * time.Millisecond, 150, 1500 * time.Millisecond},
	} {
		if got := AnnounceInterval(tc.base, tc.supernodes); got != tc.want {
			t.Errorf("AnnounceInterval(%v, %d) = %v, want %v", tc.base, tc.supernodes, got, tc.want)
		}
		if got := AnnounceInterval(tc.base, tc.supernodes); tc.supernodes > 0 && time.Duration(tc.supernodes)*time.Second/got > AnnounceBudget && got < MaxAnnounceInterval {
			t.Errorf("%d supernodes at %v make more than %d announcements a second", tc.supernodes, got, AnnounceBudget)
		}
	}
}
