package supernode

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// askView sends req to server's view protocol from h and returns the
// response, or the error when the stream is reset.
func askView(t *testing.T, h host.Host, server host.Host, req *pb.ViewRequest) (*pb.ViewResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := h.NewStream(ctx, server.ID(), protocol.ViewID)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if err := protocol.WriteFrame(s, req); err != nil {
		return nil, err
	}
	_ = s.CloseWrite()
	resp := &pb.ViewResponse{}
	if err := protocol.NewFrameReader(s, protocol.MaxViewFrame).Read(resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// TestViewServer: a serving supernode answers a view with its ring's
// version; one that does not serve, and a request beyond the bounds, get
// a reset stream.
func TestViewServer(t *testing.T) {
	n := newTestNet(t)
	srvHost, client := n.host(t), n.host(t)
	var serving atomic.Bool
	var rp ring.Published
	rp.Publish(newRing(t, srvHost.ID(), newPeerID(t)))
	dir := directory.New()
	vs := NewViewServer(rp.Load, dir.Snapshot, serving.Load, time.Now, rand.New(rand.NewPCG(1, 1)), slog.New(slog.DiscardHandler))
	srvHost.SetStreamHandler(protocol.ViewID, vs.Handle)
	key := [][]byte{[]byte(client.ID())}

	if _, err := askView(t, client, srvHost, &pb.ViewRequest{Keys: key}); err == nil {
		t.Fatal("a supernode that does not serve answered a view")
	}
	serving.Store(true)
	resp, err := askView(t, client, srvHost, &pb.ViewRequest{Keys: key})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetRingVersion() != rp.Load().Version() {
		t.Fatalf("ring version %q, want %q", resp.GetRingVersion(), rp.Load().Version())
	}
	for what, req := range map[string]*pb.ViewRequest{
		"no key":         {},
		"too many keys":  {Keys: make([][]byte, protocol.MaxViewKeys+1)},
		"empty key":      {Keys: [][]byte{{}}},
		"key too long":   {Keys: [][]byte{make([]byte, protocol.MaxViewKey+1)}},
		"too many haves": {Keys: key, Have: make([]*pb.ViewHave, protocol.MaxViewEntries+1)},
		"bad have":       {Keys: key, Have: []*pb.ViewHave{{PeerId: []byte("not a peer")}}},
	} {
		if _, err := askView(t, client, srvHost, req); err == nil {
			t.Errorf("%s: answered", what)
		}
	}
	// The server still answers a good request after the bad ones.
	if _, err := askView(t, client, srvHost, &pb.ViewRequest{Keys: key}); err != nil {
		t.Fatalf("after bad requests: %v", err)
	}
}

// FuzzViewRequest: whatever bytes decode as a ViewRequest, the server's
// check either refuses them with a reason or returns keys and haves
// within the protocol's bounds.
func FuzzViewRequest(f *testing.F) {
	id := newPeerID(f)
	for _, req := range []*pb.ViewRequest{
		{Keys: [][]byte{[]byte(id)}},
		{Keys: [][]byte{[]byte("group")}, Have: []*pb.ViewHave{{PeerId: []byte(id), Seq: 7}}, NeighboursOnly: true},
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > MaxViewRequest {
			return // the frame reader refuses it before decoding
		}
		var req pb.ViewRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		keys, have, err := checkViewRequest(&req)
		if err != nil {
			if protocol.ReasonOf(err) == "" {
				t.Fatalf("refusal without a reason: %v", err)
			}
			return
		}
		if len(keys) == 0 || len(keys) > protocol.MaxViewKeys || len(have) > protocol.MaxViewEntries {
			t.Fatalf("accepted %d keys and %d haves", len(keys), len(have))
		}
		for _, k := range keys {
			if len(k) == 0 || len(k) > protocol.MaxViewKey {
				t.Fatalf("accepted a key of %d bytes", len(k))
			}
		}
	})
}
