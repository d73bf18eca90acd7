package supernode

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
	"github.com/overlayd/overlayd/supernode/store"
)

// Offline store-and-forward of direct messages (issue 15).
//
// The sender's supernode, finding the recipient attached nowhere, asks each
// member of the recipient's home cluster (cluster.Home, R = 3) to store the
// message, and tells the sender STORED once a majority of them answered
// stored (OVER_QUOTA when a majority refused for a quota). Each replica
// checks the sender's signature and that it is in the recipient's home
// cluster by its own ring before storing on disk. When a replica learns
// from a verified presence record that the recipient attached at supernode
// L, it forwards what it holds to L as ordinary deliveries with itself as
// the origin, paced: a batch at a time, the next after the acks of the
// last, so the recipient's signed acks come back to it and it deletes what
// they acknowledge. Every replica forwards; the recipient drops the copies.

// Offline defaults.
const (
	// DefaultOfflineTTL is how long a stored message is kept.
	DefaultOfflineTTL = 7 * 24 * time.Hour
	// forwardBatch is how many stored messages a replica forwards before
	// it waits for their acks; maxForwardPass bounds one pass (the rest
	// follows on later presence refreshes).
	forwardBatch   = 64
	maxForwardPass = 1024
)

// storeWait is a direct message waiting for its home cluster's answers at
// the sender's supernode. It lives in Router.storeWaits while the routing
// goroutine, which holds a relays slot, waits: so the map is bounded by the
// relays semaphore.
type storeWait struct {
	replicas []peer.ID
	answered map[peer.ID]bool // guarded by Router.mu
	ch       chan *pb.StoreResult
}

// forwardPass is a replica forwarding what it holds for one recipient; at
// most one per recipient, each holding a relays slot.
type forwardPass struct {
	// deleted gets a token per stored message of the recipient deleted
	// on its ack while the pass runs.
	deleted chan struct{}
}

func storeKey(from peer.ID, id []byte) string { return string(from) + "/" + string(id) }

// storeOffline asks the recipient's home cluster to store msg and tells the
// sender the outcome. It runs on a routing goroutine holding a relays slot.
func (r *Router) storeOffline(msg *pb.DirectMessage, to, from peer.ID) {
	if r.cfg.Store == nil {
		r.stats.Offline.Add(1)
		r.result(from, msg.GetId(), pb.Result_STATUS_OFFLINE, "recipient is not attached to any supernode")
		return
	}
	homes := cluster.Home(r.cfg.Ring(), []byte(to))
	if len(homes) == 0 {
		r.stats.Offline.Add(1)
		r.result(from, msg.GetId(), pb.Result_STATUS_OFFLINE, "recipient is not attached to any supernode, and there is no ring to store at")
		return
	}
	key := storeKey(from, msg.GetId())
	w := &storeWait{replicas: homes, answered: map[peer.ID]bool{}, ch: make(chan *pb.StoreResult, len(homes))}
	r.mu.Lock()
	if _, dup := r.storeWaits[key]; dup {
		// A retry of a message being stored: the first attempt's answer
		// (same ID) answers the sender.
		r.mu.Unlock()
		return
	}
	r.storeWaits[key] = w
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.storeWaits, key)
		r.mu.Unlock()
	}()
	stored := &pb.DirectMessage{Id: msg.GetId(), From: msg.GetFrom(), To: msg.GetTo(), Sealed: msg.GetSealed()}
	req := &pb.StoreRequest{Message: stored, ExpiresUnixMs: r.cfg.Now().Add(r.cfg.OfflineTTL).UnixMilli()}
	frame := encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_Store{Store: req}})
	self := r.self()
	for _, h := range homes {
		if h != self && !r.links.send(h, frame) {
			r.storeAnswer(h, &pb.StoreResult{Id: msg.GetId(), From: msg.GetFrom(), Status: pb.Result_STATUS_UNREACHABLE, Detail: "link to the replica refused the frame"})
		}
	}
	if slices.Contains(homes, self) {
		// After the requests are on their way: the disks work in parallel.
		r.storeAnswer(self, r.putStored(req))
	}
	st, detail := r.tallyStore(w, len(homes))
	switch st {
	case pb.Result_STATUS_STORED:
		r.stats.OfflineSent.Add(1)
	case pb.Result_STATUS_BUSY:
		r.stats.Busy.Add(1)
	default:
		r.stats.Offline.Add(1)
	}
	r.result(from, msg.GetId(), st, detail)
}

// tallyStore waits for the replicas' answers, within 2 × LookupTimeout, and
// decides: STORED once a majority stored; OVER_QUOTA once a majority
// refused for a quota or a full store; otherwise, when every answer is in
// or the time is up, BUSY if a replica was busy, else UNREACHABLE.
func (r *Router) tallyStore(w *storeWait, n int) (pb.Result_Status, string) {
	need := n/2 + 1
	t := time.NewTimer(2 * r.cfg.LookupTimeout)
	defer t.Stop()
	var stored, quota, busy, answers int
	var quotaDetail, lastDetail string
	for answers < n {
		select {
		case <-r.stop:
			return pb.Result_STATUS_BUSY, "supernode stopping"
		case <-t.C:
			answers = n
			lastDetail = "no answer in time"
			continue
		case res := <-w.ch:
			answers++
			switch res.GetStatus() {
			case pb.Result_STATUS_STORED:
				stored++
			case pb.Result_STATUS_OVER_QUOTA:
				quota++
				quotaDetail = res.GetDetail()
			case pb.Result_STATUS_BUSY:
				busy++
			}
			if res.GetStatus() != pb.Result_STATUS_STORED {
				lastDetail = res.GetStatus().String() + ": " + res.GetDetail()
			}
		}
		switch {
		case stored >= need:
			return pb.Result_STATUS_STORED, fmt.Sprintf("kept up to %v", r.cfg.OfflineTTL)
		case quota >= need:
			return pb.Result_STATUS_OVER_QUOTA, quotaDetail
		}
	}
	detail := fmt.Sprintf("recipient offline; stored by %d of %d home-cluster supernodes, %d needed (%s)", stored, n, need, lastDetail)
	if busy > 0 {
		return pb.Result_STATUS_BUSY, detail
	}
	return pb.Result_STATUS_UNREACHABLE, detail
}

// storeAnswer hands a replica's answer to the message waiting for it: only
// from a replica asked, once each.
func (r *Router) storeAnswer(replica peer.ID, res *pb.StoreResult) {
	from, err := peer.IDFromBytes(res.GetFrom())
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.storeWaits[storeKey(from, res.GetId())]
	if w == nil || w.answered[replica] || !slices.Contains(w.replicas, replica) {
		return
	}
	w.answered[replica] = true
	w.ch <- res // room for one answer per replica
}

// onStoreRequest is a replica's side: the cheap checks on the relay read
// goroutine, then (under a relays slot, BUSY without one) the signature,
// the home cluster and the disk off it.
func (r *Router) onStoreRequest(from peer.ID, req *pb.StoreRequest) {
	m := req.GetMessage()
	answer := func(res *pb.StoreResult) {
		r.links.send(from, encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_StoreResult{StoreResult: res}}))
	}
	if m == nil {
		r.stats.OfflineInvalid.Add(1)
		return // nothing to answer for
	}
	if !r.cfg.Sems.Relays.TryAcquire() {
		r.stats.OfflineBusy.Add(1)
		answer(&pb.StoreResult{Id: m.GetId(), From: m.GetFrom(), Status: pb.Result_STATUS_BUSY, Detail: "supernode relays at capacity"})
		return
	}
	r.wg.Go(func() {
		defer r.cfg.Sems.Relays.Release()
		answer(r.putStored(req))
	})
}

// putStored checks and stores req at this replica and says how it went.
func (r *Router) putStored(req *pb.StoreRequest) *pb.StoreResult {
	m := req.GetMessage()
	res := &pb.StoreResult{Id: m.GetId(), From: m.GetFrom()}
	invalid := func(detail string) *pb.StoreResult {
		r.stats.OfflineInvalid.Add(1)
		res.Status, res.Detail = pb.Result_STATUS_INVALID, detail
		return res
	}
	if r.cfg.Store == nil {
		return invalid("this supernode keeps no offline store")
	}
	from, errFrom := peer.IDFromBytes(m.GetFrom())
	to, errTo := peer.IDFromBytes(m.GetTo())
	now := r.cfg.Now()
	expires := time.UnixMilli(req.GetExpiresUnixMs())
	switch {
	case len(m.GetId()) != protocol.MessageIDLen:
		return invalid("message id must be 16 bytes")
	case errFrom != nil || errTo != nil:
		return invalid("bad sender or recipient peer ID")
	case len(m.GetPayload()) > 0 || len(m.GetOrigin()) > 0:
		return invalid("plaintext payload or origin in a stored message")
	case !expires.After(now):
		return invalid("already expired")
	}
	// Believe the sender's name only on its signature: a supernode cannot
	// store (and spend quotas) in another client's name.
	if err := protocol.VerifyDirectSender(from, to, m.GetId(), m.GetSealed()); err != nil {
		return invalid(err.Error())
	}
	if !slices.Contains(cluster.Home(r.cfg.Ring(), []byte(to)), r.self()) {
		return invalid("this supernode is not in the recipient's home cluster")
	}
	if limit := now.Add(r.cfg.OfflineTTL); expires.After(limit) {
		expires = limit // the replica's own TTL bounds it
	}
	data, err := proto.Marshal(m)
	if err != nil {
		return invalid(err.Error())
	}
	stored, err := r.cfg.Store.PutOffline(store.Offline{Recipient: string(to), Sender: string(from), ID: m.GetId(), Data: data, Expires: expires})
	switch {
	case err == nil:
		if stored {
			r.stats.OfflineStored.Add(1)
		}
		res.Status = pb.Result_STATUS_STORED
	case errors.Is(err, store.ErrOverQuota):
		r.stats.OfflineOverQuota.Add(1)
		res.Status, res.Detail = pb.Result_STATUS_OVER_QUOTA, err.Error()
	case errors.Is(err, store.ErrFull):
		r.stats.OfflineFull.Add(1)
		res.Status, res.Detail = pb.Result_STATUS_OVER_QUOTA, err.Error()
	case errors.Is(err, store.ErrInvalid):
		return invalid(err.Error())
	default:
		r.stats.OfflineBusy.Add(1)
		r.log.Warn("offline store", "err", err)
		res.Status, res.Detail = pb.Result_STATUS_BUSY, "store: "+err.Error()
	}
	return res
}

// forwardStored starts a pass forwarding what this replica holds for
// client to supernode loc, unless one runs for client already, a quarter
// of the relays slots hold passes, or no relays slot is free (a later
// presence refresh tries again).
func (r *Router) forwardStored(client, loc peer.ID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Passes take at most a quarter of the relays slots: live messages
	// keep the rest.
	if r.closed.Load() || r.forwarding[client] != nil || len(r.forwarding) >= max(1, r.cfg.Sems.Relays.Max()/4) ||
		!r.cfg.Sems.Relays.TryAcquire() {
		return
	}
	fw := &forwardPass{deleted: make(chan struct{}, forwardBatch)}
	r.forwarding[client] = fw
	r.wg.Go(func() {
		defer r.cfg.Sems.Relays.Release()
		defer func() {
			r.mu.Lock()
			delete(r.forwarding, client)
			r.mu.Unlock()
		}()
		r.forwardPass(client, loc, fw)
	})
}

// forwardPass sends the stored messages of client to loc in put order, a
// batch at a time, waiting for a batch's acks before the next. It stops
// when nothing is left, the link to loc is half full or refuses, the
// client is not attached here (loc = self), acks stop coming, or
// maxForwardPass messages were sent.
func (r *Router) forwardPass(client, loc peer.ID, fw *forwardPass) {
	self := r.self()
	for sent := 0; sent < maxForwardPass; {
		batch, err := r.cfg.Store.Offline(string(client), forwardBatch)
		if err != nil || len(batch) == 0 {
			return
		}
		for _, o := range batch {
			m := &pb.DirectMessage{}
			if err := proto.Unmarshal(o.Data, m); err != nil {
				continue
			}
			m.Origin = []byte(self)
			if loc == self {
				if attached, _ := r.deliverLocal(client, m); !attached {
					return
				}
			} else {
				if frames, _, _ := r.links.queued(loc); frames > linkQueueFrames/2 {
					return
				}
				if !r.links.send(loc, encodeRelay(&pb.RelayFrame{Kind: &pb.RelayFrame_Deliver{Deliver: m}})) {
					return
				}
			}
			r.stats.OfflineDelivered.Add(1)
		}
		sent += len(batch)
		if !r.awaitDeleted(fw, len(batch)) {
			return
		}
	}
}

// awaitDeleted waits until n stored messages of the pass's client were
// deleted on their acks, within 2 × LookupTimeout.
func (r *Router) awaitDeleted(fw *forwardPass, n int) bool {
	t := time.NewTimer(2 * r.cfg.LookupTimeout)
	defer t.Stop()
	for range n {
		select {
		case <-fw.deleted:
		case <-t.C:
			return false
		case <-r.stop:
			return false
		}
	}
	return true
}

// deleteAcked deletes the stored message an ack acknowledges, if this
// replica holds messages for its recipient, once the recipient's signature
// checks (so a forged ack deletes nothing). The check and the disk are off
// the caller's goroutine, under a relays slot; with none free the message
// stays and is forwarded (and acked) again later.
func (r *Router) deleteAcked(a *pb.Ack) {
	if r.cfg.Store == nil {
		return
	}
	recipient, err1 := peer.IDFromBytes(a.GetFrom())
	sender, err2 := peer.IDFromBytes(a.GetTo())
	if err1 != nil || err2 != nil || r.cfg.Store.OfflineCount(string(recipient)) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() || !r.cfg.Sems.Relays.TryAcquire() {
		return
	}
	id, signed := a.GetId(), a.GetSigned()
	r.wg.Go(func() {
		defer r.cfg.Sems.Relays.Release()
		if err := protocol.VerifyAck(signed, recipient, sender, id); err != nil {
			r.stats.OfflineForgedAcks.Add(1)
			return
		}
		deleted, err := r.cfg.Store.DeleteOffline(string(recipient), string(sender), id)
		if err != nil || !deleted {
			return
		}
		r.stats.OfflineDeleted.Add(1)
		r.mu.Lock()
		fw := r.forwarding[recipient]
		r.mu.Unlock()
		if fw != nil {
			select {
			case fw.deleted <- struct{}{}:
			default:
			}
		}
	})
}

// expireStored drops the stored messages past their expiry (refresh loop).
func (r *Router) expireStored() {
	if r.cfg.Store == nil {
		return
	}
	if st := r.cfg.Store.Stats(); st.OfflineMessages == 0 && st.ReplayEntries == 0 {
		return // nothing to expire: spare the disk a transaction
	}
	n, _, err := r.cfg.Store.Expire()
	if err != nil {
		r.log.Warn("offline store expiry", "err", err)
	}
	r.stats.OfflineExpired.Add(uint64(n))
}

// OfflineStats is the offline store's state for the node's status.
type OfflineStats struct {
	Messages, Recipients int
	Bytes, MaxBytes      int64
}

// Offline returns the offline store's figures; ok is false without a store.
func (r *Router) Offline() (OfflineStats, bool) {
	if r.cfg.Store == nil {
		return OfflineStats{}, false
	}
	s := r.cfg.Store.Stats()
	return OfflineStats{Messages: s.OfflineMessages, Recipients: s.OfflineRecipients, Bytes: s.Bytes, MaxBytes: s.MaxBytes}, true
}
