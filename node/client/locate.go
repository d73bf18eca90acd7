package client

import (
	"context"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// locateTimeout bounds a locate round trip; the supernode may ask up to
// cluster.Size home members in turn.
const locateTimeout = 8 * time.Second

// Locate asks the supernode this client is attached to where target is
// attached, and returns that supernode with the addresses it gave (none
// when it knew none). It fails with ErrNotAttached while the client has no
// session and ErrNotLocated when no supernode knows target.
func (c *Client) Locate(ctx context.Context, target peer.ID) (peer.AddrInfo, error) {
	sess := c.current()
	if sess == nil {
		return peer.AddrInfo{}, ErrNotAttached
	}
	ctx, cancel := context.WithTimeout(ctx, locateTimeout)
	defer cancel()
	s, err := c.h.NewStream(ctx, sess.peer, protocol.LocateID)
	if err != nil {
		return peer.AddrInfo{}, fmt.Errorf("locate: open stream: %w", err)
	}
	dl, _ := ctx.Deadline()
	_ = s.SetDeadline(dl)
	if err := protocol.WriteFrame(s, &pb.LookupRequest{Client: []byte(target)}); err != nil {
		s.Reset()
		return peer.AddrInfo{}, fmt.Errorf("locate: write: %w", err)
	}
	var resp pb.LookupResponse
	if err := protocol.NewFrameReader(s, protocol.MaxLocateFrame).Read(&resp); err != nil {
		s.Reset()
		return peer.AddrInfo{}, fmt.Errorf("locate: read answer: %w", err)
	}
	_ = s.Close()
	if !resp.GetFound() {
		return peer.AddrInfo{}, ErrNotLocated
	}
	loc, err := peer.IDFromBytes(resp.GetLocation())
	if err != nil {
		return peer.AddrInfo{}, fmt.Errorf("locate: bad location: %w", err)
	}
	ai := peer.AddrInfo{ID: loc}
	for _, b := range resp.GetLocationAddrs() {
		if a, err := ma.NewMultiaddrBytes(b); err == nil {
			ai.Addrs = append(ai.Addrs, a)
		}
	}
	return ai, nil
}
