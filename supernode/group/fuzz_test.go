package group

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/protocol/pb"
)

// FuzzDecodeEntry: every byte read back from a replay log is input.
// DecodeEntry never panics, and what it accepts encodes again to an entry
// that decodes to the same message.
func FuzzDecodeEntry(f *testing.F) {
	f.Add(EncodeEntry(EntrySelf, &pb.GroupMessage{Group: "g", Epoch: 1, Seq: 2, From: []byte("p"), Id: []byte("0123456789abcdef"), Publish: []byte("signed"), Stamp: []byte("stamp")}))
	f.Add(EncodeEntry(EntryReplica, &pb.GroupMessage{Group: "g"}))
	f.Add([]byte{'h'})
	f.Add([]byte{'x', 0x0a, 0x01, 'g'})
	f.Fuzz(func(t *testing.T, b []byte) {
		kind, gm, ok := DecodeEntry(b)
		if !ok {
			return
		}
		if kind != EntrySelf && kind != EntryReplica {
			t.Fatalf("accepted kind %q", kind)
		}
		k2, gm2, ok := DecodeEntry(EncodeEntry(kind, gm))
		if !ok || k2 != kind || !proto.Equal(gm, gm2) {
			t.Fatalf("re-encoded entry decodes to %v %q %v, want %q %v", ok, k2, gm2, kind, gm)
		}
	})
}
