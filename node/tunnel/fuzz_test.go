package tunnel

import (
	"bytes"
	"testing"

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

// FuzzTunnelFrame feeds arbitrary bytes to the data-frame reader and
// check: no panic; an accepted frame is within the limits.
func FuzzTunnelFrame(f *testing.F) {
	for _, m := range []*pb.TunnelFrame{
		{Offset: 7, Data: []byte("hello"), Ack: 3},
		{CloseWrite: true, Offset: 1 << 30},
		{Reset_: true, Reason: "bye"},
	} {
		b, _ := protocol.AppendFrame(nil, m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr := protocol.NewFrameReader(bytes.NewReader(b), protocol.MaxTunnelFrame)
		for range 4 {
			var m pb.TunnelFrame
			if err := fr.Read(&m); err != nil {
				return
			}
			if protocol.CheckTunnelFrame(&m) == nil && (len(m.GetData()) > protocol.MaxTunnelData || len(m.GetReason()) > protocol.MaxTunnelDetail) {
				t.Fatalf("accepted a frame over the limits: %d data bytes", len(m.GetData()))
			}
		}
	})
}
