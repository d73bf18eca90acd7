package testnet

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// BenchmarkSatMemberVerify measures what the saturation benchmarks'
// lightweight members leave out and a real client does for every group
// message it delivers: protocol.OpenGroupMessage, the home's stamp and the
// publisher's signature (two Ed25519 verifications and a SHA-256 of the
// publish envelope), on a 128-byte payload. Add it to overlayd's member
// CPU per delivery when comparing with GossipSub, whose members verify the
// publisher's signature of every message they accept.
func BenchmarkSatMemberVerify(b *testing.B) {
	pk, pid, err := msgKey()
	if err != nil {
		b.Fatal(err)
	}
	hk, hid, err := msgKey()
	if err != nil {
		b.Fatal(err)
	}
	id := make([]byte, protocol.MessageIDLen)
	publish, err := protocol.SignPublish(pk, satGroup, id, satPayload(0, 1))
	if err != nil {
		b.Fatal(err)
	}
	stamp, err := protocol.Stamp(hk, satGroup, 1, 1, publish)
	if err != nil {
		b.Fatal(err)
	}
	gm := &pb.GroupMessage{Group: satGroup, Epoch: 1, Seq: 1, From: []byte(pid), Id: id, Publish: publish, Stamp: stamp}
	isHome := func(p peer.ID) bool { return p == hid }
	b.ReportAllocs()
	// CPU time as well as wall time: on a shared machine the wall time of
	// an op includes the time other processes held the core.
	c0 := processCPU()
	for b.Loop() {
		if _, err := protocol.OpenGroupMessage(gm, isHome); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((processCPU()-c0).Microseconds())/float64(b.N), "cpu-µs/op")
}
