package tunnel

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// FuzzTunnelOpen feeds arbitrary bytes to the decoder of the open and
// resume requests and their answers: no panic, no frame over the limit
// accepted, and an accepted request survives a round trip.
func FuzzTunnelOpen(f *testing.F) {
	for _, m := range []proto.Message{
		&pb.TunnelOpen{Service: "web", TunnelId: make([]byte, protocol.TunnelIDLen)},
		&pb.TunnelOpen{Service: "web", TunnelId: make([]byte, protocol.TunnelIDLen), Resume: true, Received: 1 << 20},
		&pb.TunnelOpenResponse{Status: pb.TunnelStatus_TUNNEL_REFUSED, Detail: "no"},
	} {
		b, _ := protocol.AppendFrame(nil, m)
		f.Add(b)
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		var req pb.TunnelOpen
		if err := readOpen(bytes.NewReader(b), &req); err == nil {
			if proto.Size(&req) > protocol.MaxTunnelOpenFrame {
				t.Fatalf("accepted %d bytes", proto.Size(&req))
			}
			if protocol.CheckTunnelOpen(&req) == nil {
				out, err := protocol.AppendFrame(nil, &req)
				if err != nil {
					t.Fatal(err)
				}
				var again pb.TunnelOpen
				if err := readOpen(bytes.NewReader(out), &again); err != nil || !proto.Equal(&req, &again) {
					t.Fatalf("round trip: %v", err)
				}
			}
		}
		var resp pb.TunnelOpenResponse
		_ = readOpen(bytes.NewReader(b), &resp)
	})
}

// FuzzTunnelFrame feeds arbitrary bytes to the data path's hand-written
// TunnelFrame decoder and checks it against proto.Unmarshal of the same
// bytes: the same acceptance (after the checks) and the same fields; an
// accepted frame re-encoded by AppendTunnelFrame decodes to itself.
func FuzzTunnelFrame(f *testing.F) {
	for _, m := range []*pb.TunnelFrame{
		{Offset: 7, Data: []byte("hello"), Ack: 3},
		{CloseWrite: true, Offset: 1 << 30},
		{Reset_: true, Reason: "bye"},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Add([]byte{0x08, 0x01, 0x08, 0x02, 0x12, 0x01, 'x', 0x1a, 0x00})
	// A reason that is not UTF-8, replaced by a later one that is:
	// proto.Unmarshal refuses the frame all the same.
	f.Add([]byte{0x32, 0x01, 0xff, 0x32, 0x01, 'a'})
	f.Fuzz(func(t *testing.T, b []byte) {
		var v protocol.TunnelFrameView
		verr := protocol.DecodeTunnelFrame(b, &v)
		if verr == nil {
			verr = protocol.CheckTunnelFrameView(&v)
		}
		var m pb.TunnelFrame
		merr := proto.Unmarshal(b, &m)
		if merr == nil {
			merr = protocol.CheckTunnelFrame(&m)
		}
		if (verr == nil) != (merr == nil) {
			t.Fatalf("hand decoder: %v; proto: %v", verr, merr)
		}
		if verr != nil {
			return
		}
		if v.Offset != m.Offset || !bytes.Equal(v.Data, m.Data) || v.CloseWrite != m.CloseWrite || v.Ack != m.Ack || v.Reset != m.Reset_ || v.Reason != m.Reason {
			t.Fatalf("hand decoder %+v, proto %v", v, &m)
		}
		half := len(v.Data) / 2
		out := protocol.AppendTunnelFrame(nil, &v, v.Data[:half], v.Data[half:])
		var again protocol.TunnelFrameView
		if err := protocol.NewTunnelFrameReader(bytes.NewReader(out)).Read(&again); err != nil {
			t.Fatal(err)
		}
		if again.Offset != v.Offset || !bytes.Equal(again.Data, v.Data) || again.CloseWrite != v.CloseWrite || again.Ack != v.Ack || again.Reset != v.Reset || again.Reason != v.Reason {
			t.Fatalf("round trip %+v, want %+v", again, v)
		}
		_, n := protowire.ConsumeVarint(out)
		var viaProto pb.TunnelFrame
		want := &pb.TunnelFrame{Offset: v.Offset, Data: v.Data, CloseWrite: v.CloseWrite, Ack: v.Ack, Reset_: v.Reset, Reason: v.Reason}
		if err := proto.Unmarshal(out[n:], &viaProto); err != nil || !proto.Equal(&viaProto, want) {
			t.Fatalf("AppendTunnelFrame's encoding is not TunnelFrame's: %v", err)
		}
	})
}
