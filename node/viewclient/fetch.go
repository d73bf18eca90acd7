package viewclient

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/overlay/view"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

// fetched is one supernode's answer to a view request.
type fetched struct {
	server  peer.ID
	entries []peer.ID // every entry of the response
	members []ring.Member
	home    []peer.ID // the node's own home cluster by members
	version string
}

// Purposes of a fetch, the values of overlayd_directory_view_fetches_total{purpose}.
const (
	purposeRefresh = "refresh"
	purposeCheck   = "check"
)

// fetchFull fetches the node's whole view from ai: the first
// protocol.MaxViewKeys keys with spares and megas, any further keys in
// more requests for their neighbourhoods only.
func (c *Client) fetchFull(ctx context.Context, ai peer.AddrInfo) (*fetched, error) {
	keys := c.keys()
	var all *fetched
	for len(keys) > 0 {
		k := min(len(keys), protocol.MaxViewKeys)
		f, err := c.fetch(ctx, ai, keys[:k], all != nil, purposeRefresh)
		if err != nil {
			return nil, err
		}
		if all == nil {
			all = f
		} else {
			all.entries = append(all.entries, f.entries...)
			for _, m := range f.members {
				if !slices.ContainsFunc(all.members, func(x ring.Member) bool { return x.ID == m.ID }) {
					all.members = append(all.members, m)
				}
			}
		}
		keys = keys[k:]
	}
	slices.SortFunc(all.members, func(a, b ring.Member) int { return cmp.Compare(a.ID, b.ID) })
	return all, nil
}

// fetch asks ai for the view of keys, applies its signed entries to the
// directory (each checked; refusals counted by reason), and returns the
// members and the node's home it gives.
func (c *Client) fetch(ctx context.Context, ai peer.AddrInfo, keys [][]byte, neighboursOnly bool, purpose string) (*fetched, error) {
	resp, err := c.ask(ctx, ai, keys, neighboursOnly)
	if err != nil {
		c.m.fetches.WithLabelValues(purpose, "error").Inc()
		return nil, err
	}
	c.m.fetches.WithLabelValues(purpose, "ok").Inc()
	c.m.bytes.Add(float64(proto.Size(resp)))
	f := &fetched{server: ai.ID, version: resp.GetRingVersion()}
	now := c.cfg.Now()
	for _, ve := range resp.GetEntries() {
		id, err := peer.IDFromBytes(ve.GetPeerId())
		if err != nil {
			continue
		}
		f.entries = append(f.entries, id)
		if len(ve.GetSigned()) == 0 {
			continue
		}
		result := "accepted"
		// One signature check: OpenSigned's; Receive trusts its signer.
		signer, data, err := protocol.OpenSigned(ve.GetSigned())
		switch {
		case err != nil:
		case signer != id:
			err = protocol.Reject(protocol.ReasonSignerMismatch, "entry for %s signed by %s", id.ShortString(), signer.ShortString())
		default:
			_, err = c.cfg.Dir.Receive(signer, data, ve.GetSigned(), now)
		}
		if err != nil {
			// stale_seq: the node holds it already, or a newer one (its
			// signature was checked all the same, so it is counted).
			result = string(protocol.ReasonOf(err))
			c.log.Debug("view entry refused", "server", ai.ID.ShortString(), "entry", id.ShortString(), "err", err)
		}
		c.m.entries.WithLabelValues(result).Inc()
	}
	f.members = view.Members(resp, c.cfg.Dir)
	f.home = view.Home(f.members, []byte(c.cfg.Host.ID()))
	return f, nil
}

// ask runs one view request, bounded by fetchTimeout.
func (c *Client) ask(ctx context.Context, ai peer.AddrInfo, keys [][]byte, neighboursOnly bool) (*pb.ViewResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	h := c.cfg.Host
	if len(ai.Addrs) > 0 {
		h.Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.TempAddrTTL)
	}
	s, err := h.NewStream(ctx, ai.ID, protocol.ViewID)
	if err != nil {
		return nil, fmt.Errorf("view from %s: %w", ai.ID.ShortString(), err)
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	req := &pb.ViewRequest{Keys: keys, NeighboursOnly: neighboursOnly}
	for _, e := range c.cfg.Dir.Snapshot().Entries {
		if len(req.Have) == protocol.MaxViewEntries {
			break
		}
		req.Have = append(req.Have, &pb.ViewHave{PeerId: []byte(e.ID), Seq: e.Seq})
	}
	if err := protocol.WriteFrame(s, req); err != nil {
		s.Reset()
		return nil, fmt.Errorf("view request to %s: %w", ai.ID.ShortString(), err)
	}
	_ = s.CloseWrite()
	resp := &pb.ViewResponse{}
	if err := protocol.NewFrameReader(s, protocol.MaxViewFrame).Read(resp); err != nil {
		s.Reset()
		return nil, fmt.Errorf("view from %s: %w", ai.ID.ShortString(), err)
	}
	return resp, nil
}
