package supernode

import (
	"context"
	"errors"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode/group"
)

// Presence: a client's location is kept by the members of its home
// cluster (ring.LookupN(client ID, R)). The supernode a client attaches to
// tells them, and re-tells them every Refresh, so records follow ring
// changes and survive a home member's restart; a record not refreshed for
// 3 × Refresh expires. Records are ordered by the client's session seq, so
// a late "detached" from an old supernode cannot erase a newer attachment,
// and a supernode may only speak for its own sessions.

// presenceRecord is where a client is, as its home knows it.
type presenceRecord struct {
	location peer.ID
	seq      uint64
	expires  time.Time
}

// cachedLocation is a looked-up location.
type cachedLocation struct {
	location peer.ID
	expires  time.Time
}

type presenceUpdate struct {
	client   peer.ID
	seq      uint64
	attached bool
	claim    []byte // attached: the client's signed claim
}

// localSession is a client attached here, as presence refreshes need it.
type localSession struct {
	seq   uint64
	claim []byte
}

// batchLimit bounds the records of one presence or membership frame.
const batchLimit = 1000

// sendPresence tells each update's home cluster, one batch per member.
func (r *Router) sendPresence(ups []presenceUpdate) {
	batches := map[peer.ID][]*pb.PresenceRecord{}
	self := r.self()
	for _, u := range ups {
		rec := &pb.PresenceRecord{Client: []byte(u.client), Location: []byte(self), SessionSeq: u.seq, Attached: u.attached, Claim: u.claim}
		for _, h := range cluster.Home(r.cfg.Ring(), []byte(u.client)) {
			batches[h] = append(batches[h], rec)
		}
	}
	for h, recs := range batches {
		for _, b := range presenceBatches(recs) {
			if h == self {
				r.applyPresence(self, b)
				continue
			}
			r.links.send(h, encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_Presence{Presence: b}}))
		}
	}
}

// presenceBatches splits recs into batches that each fit a relay frame
// (see splitRecords).
func presenceBatches(recs []*pb.PresenceRecord) []*pb.PresenceBatch {
	var out []*pb.PresenceBatch
	for _, b := range splitRecords(recs) {
		out = append(out, &pb.PresenceBatch{Records: b})
	}
	return out
}

// splitRecords splits the records of a presence or membership batch into
// runs of at most batchLimit records and batchBytes encoded bytes, so that
// each batch's relay frame fits protocol.MaxRelayFrame. A record with a
// signed claim is ~300 bytes, so batchLimit of them (~295 KiB) do not fit:
// a supernode refuses such a frame and resets the link, and a supernode with
// more than ~870 memberships (or ~930 clients' presence) at one home never
// got them all there.
func splitRecords[R proto.Message](recs []R) [][]R {
	var out [][]R
	for len(recs) > 0 {
		n, size := 0, 0
		for n < len(recs) && n < batchLimit {
			// A record in the batch: its tag, its length, its bytes.
			rs := proto.Size(recs[n])
			rs += 1 + protowire.SizeVarint(uint64(rs))
			if n > 0 && size+rs > batchBytes {
				break
			}
			size += rs
			n++
		}
		out = append(out, recs[:n])
		recs = recs[n:]
	}
	return out
}

// batchBytes bounds a presence or membership batch's records in bytes: a
// relay frame less the RelayFrame's and the length prefix's few bytes.
const batchBytes = protocol.MaxRelayFrame - 64

// applyPresence records what supernode from says about its own sessions,
// within the presence bounds (records.go): a new record from another
// supernode past them is refused and counted.
// A verified attachment of a client this supernode holds stored messages
// for starts forwarding them (offline.go).
func (r *Router) applyPresence(from peer.ID, b *pb.PresenceBatch) {
	r.mu.Lock()
	attached := r.applyPresenceLocked(from, b)
	r.mu.Unlock()
	for _, c := range attached {
		r.forwardStored(c, from)
	}
}

// applyPresenceLocked applies b and returns the clients it recorded as
// attached at from that have messages stored here.
func (r *Router) applyPresenceLocked(from peer.ID, b *pb.PresenceBatch) (stored []peer.ID) {
	now := r.cfg.Now()
	ttl := 3 * r.cfg.Refresh
	self := r.self()
	for _, rec := range b.GetRecords() {
		client, err := peer.IDFromBytes(rec.GetClient())
		if err != nil || peer.ID(rec.GetLocation()) != from {
			continue
		}
		cur, ok := r.presence[client]
		if ok && rec.GetSessionSeq() < cur.seq {
			continue
		}
		if rec.GetAttached() {
			moved := !ok || cur.location != from
			if moved && from != self {
				// The bounds first: they cost nothing to check, and a
				// supernode over its share gets no signature checked.
				full, originFull := r.presenceBy.room(from, r.bounds.presence, r.bounds.presencePerOrigin)
				switch {
				case full:
					r.stats.PresenceFull.Add(1)
					continue
				case originFull:
					r.stats.PresenceOriginFull.Add(1)
					continue
				}
			}
			// Believe an attachment only on the client's word: a refresh
			// of the record already verified is let through, anything
			// else must carry the client's claim for this supernode and
			// session (a supernode can no longer move a client to itself).
			if refresh := ok && cur.location == from && cur.seq == rec.GetSessionSeq(); !refresh {
				if err := protocol.VerifyPresence(rec.GetClaim(), client, from, rec.GetSessionSeq()); err != nil {
					r.stats.PresenceRefused.Add(1)
					r.log.Debug("presence refused", "client", client.ShortString(), "from", from.ShortString(), "err", err)
					continue
				}
			}
			if moved {
				if ok {
					r.presenceBy.remove(cur.location)
				}
				r.presenceBy.add(from)
			}
			r.presence[client] = presenceRecord{location: from, seq: rec.GetSessionSeq(), expires: now.Add(ttl)}
			if r.cfg.Store != nil && r.cfg.Store.OfflineCount(string(client)) > 0 {
				stored = append(stored, client)
			}
		} else if ok && cur.location == from {
			r.deletePresenceLocked(client, cur)
		}
	}
	return stored
}

func (r *Router) deletePresenceLocked(client peer.ID, rec presenceRecord) {
	delete(r.presence, client)
	r.presenceBy.remove(rec.location)
}

// locate finds the supernode a client is attached to: the cache (unless
// fresh), this supernode's own presence records, then the other members of
// the client's home cluster, asked in ring order under the lookups
// semaphore.
func (r *Router) locate(client peer.ID, fresh bool) (peer.ID, bool) {
	now := r.cfg.Now()
	r.mu.Lock()
	if c, ok := r.cache[client]; ok && !fresh && now.Before(c.expires) {
		r.mu.Unlock()
		return c.location, true
	}
	if p, ok := r.presence[client]; ok && now.Before(p.expires) {
		r.mu.Unlock()
		return p.location, true
	}
	r.mu.Unlock()
	if !r.cfg.Sems.Lookups.TryAcquire() {
		return "", false
	}
	defer r.cfg.Sems.Lookups.Release()
	for _, h := range cluster.Home(r.cfg.Ring(), []byte(client)) {
		if h == r.self() {
			continue
		}
		resp, err := r.lookup(h, &pb.LookupRequest{Client: []byte(client)})
		if err != nil || !resp.GetFound() {
			continue
		}
		loc, err := peer.IDFromBytes(resp.GetLocation())
		if err != nil {
			continue
		}
		r.mu.Lock()
		if len(r.cache) >= r.cfg.CacheSize {
			for k := range r.cache { // evict one arbitrary entry
				delete(r.cache, k)
				break
			}
		}
		r.cache[client] = cachedLocation{location: loc, expires: now.Add(r.cfg.CacheTTL)}
		r.mu.Unlock()
		return loc, true
	}
	return "", false
}

func (r *Router) dropCached(client peer.ID) {
	r.mu.Lock()
	delete(r.cache, client)
	r.mu.Unlock()
}

// lookup asks supernode h one question.
func (r *Router) lookup(h peer.ID, req *pb.LookupRequest) (*pb.LookupResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.LookupTimeout)
	defer cancel()
	s, err := r.h.NewStream(ctx, h, protocol.LookupID)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	dl, _ := ctx.Deadline()
	_ = s.SetDeadline(dl)
	if err := protocol.WriteFrame(s, req); err != nil {
		s.Reset()
		return nil, err
	}
	var resp pb.LookupResponse
	if err := protocol.NewFrameReader(s, protocol.MaxLookupFrame).Read(&resp); err != nil {
		s.Reset()
		return nil, err
	}
	return &resp, nil
}

var errNotSupernode = errors.New("lookup from a peer that is not a supernode")

// handleLookup answers where a client is, or who a group's members are.
func (r *Router) handleLookup(s network.Stream) {
	if err := s.Scope().SetService(LookupService); err != nil {
		s.Reset()
		return
	}
	if !r.cfg.IsSupernode(s.Conn().RemotePeer()) {
		r.log.Debug("lookup refused", "err", errNotSupernode)
		s.Reset()
		return
	}
	if err := s.Scope().ReserveMemory(2*protocol.MaxLookupFrame, network.ReservationPriorityAlways); err != nil {
		s.Reset()
		return
	}
	defer s.Scope().ReleaseMemory(2 * protocol.MaxLookupFrame)
	_ = s.SetDeadline(r.cfg.Now().Add(r.cfg.LookupTimeout))
	var req pb.LookupRequest
	if err := protocol.NewFrameReader(s, protocol.MaxLookupFrame).Read(&req); err != nil {
		s.Reset()
		return
	}
	resp := &pb.LookupResponse{}
	now := r.cfg.Now()
	r.mu.Lock()
	if g := req.GetGroup(); g != "" {
		if ms, ok := r.core.Members(g); ok {
			for _, m := range ms {
				resp.Members = append(resp.Members, []byte(m))
			}
			resp.Found = true
		}
	} else if client, err := peer.IDFromBytes(req.GetClient()); err == nil {
		if p, ok := r.presence[client]; ok && now.Before(p.expires) {
			resp.Found, resp.Location = true, []byte(p.location)
		}
	}
	r.mu.Unlock()
	if err := protocol.WriteFrame(s, resp); err != nil {
		s.Reset()
		return
	}
	s.Close()
}

// refreshLoop re-sends presence and memberships, and expires what was not
// refreshed.
func (r *Router) refreshLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.Refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.refresh()
	}
}

func (r *Router) refresh() {
	now := r.cfg.Now()
	var ups []presenceUpdate
	r.mu.Lock()
	for c, ls := range r.sessions {
		ups = append(ups, presenceUpdate{client: c, seq: ls.seq, attached: true, claim: ls.claim})
	}
	for c, p := range r.presence {
		if !now.Before(p.expires) {
			r.deletePresenceLocked(c, p)
		}
	}
	for c, l := range r.cache {
		if !now.Before(l.expires) {
			delete(r.cache, c)
		}
	}
	r.mu.Unlock()
	r.sendPresence(ups)
	r.withCore(func(c *group.Core, now time.Time) { c.Refresh(now) })
	r.expireStored()
}
