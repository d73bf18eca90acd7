package protocol

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"

	"github.com/overlayd/overlayd/protocol/pb"
)

func edKey(t testing.TB) (crypto.PrivKey, peer.ID) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return k, id
}

func TestDirectRoundTrip(t *testing.T) {
	aKey, a := edKey(t)
	bKey, b := edKey(t)
	id := NewMessageID()
	sent := time.UnixMilli(1_700_000_000_123)
	sealed, err := SealDirect(aKey, b, id, sent, []byte("hello b"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("hello b")) {
		t.Fatal("the sealed message carries the plaintext")
	}
	got, at, err := OpenDirect(bKey, a, id, sealed)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "hello b" || !at.Equal(sent) {
		t.Fatalf("opened %q sent %v", got, at)
	}
	if len(sealed) > len("hello b")+MaxSealedDirect-MaxPayload {
		t.Fatalf("sealing added %d bytes, more than MaxSealedDirect allows", len(sealed)-len("hello b"))
	}
}

// TestDirectForgeries: what a relaying supernode could do to a direct
// message, each refused by the recipient.
func TestDirectForgeries(t *testing.T) {
	aKey, a := edKey(t)
	bKey, b := edKey(t)
	cKey, c := edKey(t) // the attacker: a supernode, or another client
	id := NewMessageID()
	sealed, err := SealDirect(aKey, b, id, time.Now(), []byte("for b only"))
	if err != nil {
		t.Fatal(err)
	}
	forgedByC, err := SealDirect(cKey, b, id, time.Now(), []byte("I am a"))
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(sealed)
	flipped[len(flipped)/2] ^= 1
	for _, tc := range []struct {
		name   string
		key    crypto.PrivKey
		from   peer.ID
		id     []byte
		sealed []byte
		want   error
	}{
		{"shown as coming from another client", bKey, c, id, sealed, ErrDirectSignature},
		{"signed by the attacker in a's name", bKey, a, id, forgedByC, ErrDirectSignature},
		{"replayed under another message ID", bKey, a, NewMessageID(), sealed, ErrDirectMismatch},
		{"delivered to someone else", cKey, a, id, sealed, ErrDirectMismatch},
		{"altered in transit", bKey, a, id, flipped, ErrDirectSignature},
		{"missing", bKey, a, id, nil, ErrDirectSignature},
		{"oversized", bKey, a, id, make([]byte, MaxSealedDirect+1), ErrDirectSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := OpenDirect(tc.key, tc.from, tc.id, tc.sealed); !errors.Is(err, tc.want) {
				t.Fatalf("OpenDirect = %v, want %v", err, tc.want)
			}
		})
	}
	// A message c encrypted to b cannot be read by c once sealed to b, and
	// one sealed to c cannot be passed off as sealed to b: the signature
	// covers the recipient.
	_ = c
}

// TestDirectCiphertextSwap: an attacker who re-signs someone else's
// ciphertext in its own name cannot get it decrypted: the HPKE info binds
// the sender.
func TestDirectCiphertextSwap(t *testing.T) {
	aKey, _ := edKey(t)
	bKey, b := edKey(t)
	cKey, c := edKey(t)
	id := NewMessageID()
	sealed, err := SealDirect(aKey, b, id, time.Now(), []byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	var rec pb.SealedDirect
	if _, err := record.ConsumeTypedEnvelope(sealed, directKind.of(&rec)); err != nil {
		t.Fatal(err)
	}
	env, err := record.Seal(directKind.of(&rec), cKey) // c claims a's ciphertext as its own
	if err != nil {
		t.Fatal(err)
	}
	resigned, err := env.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := OpenDirect(bKey, c, id, resigned); !errors.Is(err, ErrDirectDecrypt) {
		t.Fatalf("a re-signed ciphertext opened: %v", err)
	}
}

func TestAckSignature(t *testing.T) {
	_, a := edKey(t)
	bKey, b := edKey(t)
	cKey, _ := edKey(t)
	id := NewMessageID()
	ack, err := SignAck(bKey, a, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyAck(ack, b, a, id); err != nil {
		t.Fatalf("a genuine ack: %v", err)
	}
	forged, err := SignAck(cKey, a, id) // a supernode acking for b
	if err != nil {
		t.Fatal(err)
	}
	for name, check := range map[string]error{
		"forged by another key":  VerifyAck(forged, b, a, id),
		"for another message":    VerifyAck(ack, b, a, NewMessageID()),
		"for another sender":     VerifyAck(ack, b, b, id),
		"missing (unsigned ack)": VerifyAck(nil, b, a, id),
		"oversized":              VerifyAck(make([]byte, MaxSignedAck+1), b, a, id),
	} {
		if !errors.Is(check, ErrAckSignature) {
			t.Errorf("%s: %v, want ErrAckSignature", name, check)
		}
	}
}

func FuzzOpenDirect(f *testing.F) {
	aKey, a := edKey(f)
	bKey, b := edKey(f)
	id := NewMessageID()
	sealed, err := SealDirect(aKey, b, id, time.Now(), []byte("seed"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sealed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		payload, _, err := OpenDirect(bKey, a, id, b)
		if err == nil && !bytes.Equal(b, sealed) && string(payload) != "seed" {
			// Only a's genuine signature over a ciphertext to b opens;
			// the fuzzer cannot sign as a.
			t.Fatalf("opened a message a never sent: %q", payload)
		}
	})
}

func FuzzVerifyAck(f *testing.F) {
	_, a := edKey(f)
	bKey, b := edKey(f)
	id := NewMessageID()
	ack, err := SignAck(bKey, a, id)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ack)
	f.Fuzz(func(t *testing.T, in []byte) {
		if VerifyAck(in, b, a, id) == nil && !bytes.Equal(in, ack) {
			var rec pb.AckRecord
			if _, err := record.ConsumeTypedEnvelope(in, ackKind.of(&rec)); err != nil {
				t.Fatalf("accepted an ack that does not even parse: %x", in)
			}
		}
	})
}

// TestVerifyDirectSender: a storing supernode accepts a message only as
// its signer's, for the recipient and ID it was signed for, and can check
// that without the recipient's key.
func TestVerifyDirectSender(t *testing.T) {
	aKey, a := edKey(t)
	_, b := edKey(t)
	cKey, c := edKey(t)
	id := NewMessageID()
	sealed, err := SealDirect(aKey, b, id, time.Now(), []byte("for b"))
	if err != nil {
		t.Fatal(err)
	}
	byC, err := SealDirect(cKey, b, id, time.Now(), []byte("c in a's name"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		from, to peer.ID
		id       []byte
		sealed   []byte
		want     error
	}{
		{"genuine", a, b, id, sealed, nil},
		{"another sender's name", a, b, id, byC, ErrDirectSignature},
		{"claimed by another sender", c, b, id, sealed, ErrDirectSignature},
		{"another recipient", a, c, id, sealed, ErrDirectMismatch},
		{"another id", a, b, NewMessageID(), sealed, ErrDirectMismatch},
		{"empty", a, b, id, nil, ErrDirectSignature},
		{"garbage", a, b, id, []byte("not an envelope"), ErrDirectSignature},
		{"too large", a, b, id, make([]byte, MaxSealedDirect+1), ErrDirectSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := VerifyDirectSender(tc.from, tc.to, tc.id, tc.sealed)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("VerifyDirectSender = %v, want %v", err, tc.want)
			}
		})
	}
}
