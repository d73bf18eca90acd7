package protocol

import (
	"errors"
	"testing"
)

func TestPresenceClaim(t *testing.T) {
	cKey, c := edKey(t)
	_, s := edKey(t)
	oKey, other := edKey(t) // another supernode, or anyone
	claim, err := SignPresence(cKey, s, 42)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyPresence(claim, c, s, 42); err != nil {
		t.Fatalf("a genuine claim: %v", err)
	}
	forged, err := SignPresence(oKey, other, 1<<63) // "c is at me", signed by me
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"claimed by another supernode": VerifyPresence(claim, c, other, 42),
		"replayed for another session": VerifyPresence(claim, c, s, 43),
		"forged by the attacker for c": VerifyPresence(forged, c, other, 1<<63),
		"another client's claim":       VerifyPresence(claim, other, s, 42),
		"missing":                      VerifyPresence(nil, c, s, 42),
		"oversized":                    VerifyPresence(make([]byte, MaxClaim+1), c, s, 42),
	} {
		if !errors.Is(err, ErrClaim) {
			t.Errorf("%s: %v, want ErrClaim", name, err)
		}
	}
}

func TestMembershipClaim(t *testing.T) {
	mKey, m := edKey(t)
	_, s := edKey(t)
	want := Membership{Group: "team", Supernode: s, Join: true, Seq: 7}
	claim, err := SignMembership(mKey, want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyMembership(claim, m, "team")
	if err != nil || got != want {
		t.Fatalf("VerifyMembership = %+v, %v; want %+v", got, err, want)
	}
	_, other := edKey(t)
	if _, err := VerifyMembership(claim, m, "other-group"); !errors.Is(err, ErrClaim) {
		t.Errorf("a claim for another group: %v", err)
	}
	if _, err := VerifyMembership(claim, other, "team"); !errors.Is(err, ErrClaim) {
		t.Errorf("another member's claim: %v", err)
	}
}

func FuzzVerifyClaims(f *testing.F) {
	cKey, c := edKey(f)
	_, s := edKey(f)
	p, _ := SignPresence(cKey, s, 1)
	mc, _ := SignMembership(cKey, Membership{Group: "g", Supernode: s, Join: true, Seq: 1})
	f.Add(p)
	f.Add(mc)
	f.Fuzz(func(t *testing.T, b []byte) {
		// Neither may panic, and whatever verifies says what c signed
		// (an envelope may be re-encoded, but not its signed content).
		_ = VerifyPresence(b, c, s, 1)
		if got, err := VerifyMembership(b, c, "g"); err == nil && (got.Supernode != s || !got.Join || got.Seq != 1) {
			t.Fatalf("accepted a membership claim c never signed: %+v", got)
		}
	})
}
