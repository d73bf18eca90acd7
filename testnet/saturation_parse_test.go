package testnet

import (
	"os"
	"testing"
	"time"

	"github.com/overlayd/overlayd/protocol"
)

// TestSatPayloadFoundInSignedPublish checks that a lightweight member
// finds the send time and index of a saturation payload inside the
// publisher's signed envelope, as a group message carries it, without
// decoding the envelope; and that a payload without the marker is not
// taken for one.
func TestSatPayloadFoundInSignedPublish(t *testing.T) {
	k, _, err := msgKey()
	if err != nil {
		t.Fatal(err)
	}
	p := satPayload(1234*time.Millisecond, 7<<32|42)
	if len(p) != msgPayloadSize {
		t.Fatalf("payload is %d bytes, want %d", len(p), msgPayloadSize)
	}
	signed, err := protocol.SignPublish(k, satGroup, make([]byte, protocol.MessageIDLen), p)
	if err != nil {
		t.Fatal(err)
	}
	sent, idx, ok := satPayloadOf(signed)
	if !ok || sent != 1234*time.Millisecond || idx != 7<<32|42 {
		t.Fatalf("satPayloadOf = %v, %d, %v; want 1.234s, %d, true", sent, idx, ok, uint64(7<<32|42))
	}
	plain, err := protocol.SignPublish(k, satGroup, make([]byte, protocol.MessageIDLen), msgPayload(time.Second, 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := satPayloadOf(plain); ok {
		t.Fatal("a payload without the marker was read as a saturation payload")
	}
}

// TestSatProcReadings checks the /proc readings on this process: CPU
// time that grows with work, and write counts that grow with writes.
func TestSatProcReadings(t *testing.T) {
	c0, ok := satProcCPU("self")
	if !ok {
		t.Skip("no /proc/self/stat")
	}
	_, w0, ok := satProcIO("self")
	if !ok {
		t.Skip("no /proc/self/io")
	}
	x := 0
	for c := c0; c-c0 < 30*time.Millisecond; c, _ = satProcCPU("self") {
		for i := range 1_000_000 {
			x += i
		}
	}
	f := t.TempDir() + "/w"
	if err := writeFileN(f, 1<<16); err != nil {
		t.Fatal(err)
	}
	if _, w1, _ := satProcIO("self"); w1-w0 < 1<<16 {
		t.Fatalf("wchar grew by %d after writing %d bytes", w1-w0, 1<<16)
	}
	_ = x
}

func writeFileN(name string, n int) error { return os.WriteFile(name, make([]byte, n), 0o644) }
