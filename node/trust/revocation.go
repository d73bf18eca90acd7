package trust

import (
	"context"
	"fmt"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/protocol"
)

// JoinRevocations joins the revocation topic on ps: valid revocations
// (signed by a trusted operator key) are remembered until the revoked
// certificate would have expired, and remove its holder from the
// directory. The validator runs inline; Run reads the subscription.
func (k *Keeper) JoinRevocations(ps *pubsub.PubSub) error {
	err := ps.RegisterTopicValidator(protocol.RevocationTopic, func(_ context.Context, _ peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
		if !k.receive(msg.GetData()) {
			return pubsub.ValidationReject
		}
		return pubsub.ValidationAccept
	}, pubsub.WithValidatorInline(true))
	if err != nil {
		return fmt.Errorf("revocation topic: %w", err)
	}
	topic, err := ps.Join(protocol.RevocationTopic)
	if err != nil {
		return fmt.Errorf("revocation topic: %w", err)
	}
	sub, err := topic.Subscribe()
	if err != nil {
		return fmt.Errorf("revocation topic: %w", err)
	}
	k.sub = sub
	k.publish = func(ctx context.Context, raw []byte) error { return topic.Publish(ctx, raw) }
	return nil
}

// receive applies a revocation heard on the topic, and reports whether
// it was valid (a refusal is counted).
func (k *Keeper) receive(raw []byte) bool {
	r, err := protocol.VerifyRevocation(raw, k.cfg.Trusted)
	if err != nil {
		k.cfg.Rejected(protocol.ReasonOf(err))
		return false
	}
	k.apply(r)
	return true
}

// apply remembers r until the revoked certificate would have expired,
// forgets the revocations that are moot, and removes the holder of r's
// certificate from the directory.
func (k *Keeper) apply(r protocol.Revocation) {
	now := k.cfg.Now()
	k.mu.Lock()
	_, known := k.revoked[r.Serial]
	k.revoked[r.Serial] = r.NotAfter
	for s, until := range k.revoked {
		if now.After(until.Add(protocol.ClockSkew)) {
			delete(k.revoked, s)
		}
	}
	k.mu.Unlock()
	if !known {
		k.cfg.Log.Info("certificate revoked", "serial", r.Serial)
	}
	k.cfg.Directory.Revoke(r.Serial)
}

// Revoke applies a revocation here and spreads it to the network; Run
// re-publishes it every announce interval until the revoked certificate
// would have expired, so nodes that join later learn it too.
func (k *Keeper) Revoke(ctx context.Context, raw []byte) (protocol.Revocation, error) {
	r, err := protocol.VerifyRevocation(raw, k.cfg.Trusted)
	if err != nil {
		return r, fmt.Errorf("revoke: %w", err)
	}
	if k.publish == nil {
		return r, fmt.Errorf("revoke: %w", errNoTopic)
	}
	k.apply(r)
	k.mu.Lock()
	k.own = append(k.own, raw)
	k.mu.Unlock()
	return r, k.publish(ctx, raw)
}

// republish publishes again the revocations submitted here that are not
// moot yet, and forgets the others.
func (k *Keeper) republish(ctx context.Context) {
	now := k.cfg.Now()
	k.mu.Lock()
	var keep [][]byte
	for _, raw := range k.own {
		if r, err := protocol.VerifyRevocation(raw, k.cfg.Trusted); err == nil && now.Before(r.NotAfter.Add(protocol.ClockSkew)) {
			keep = append(keep, raw)
		}
	}
	k.own = keep
	k.mu.Unlock()
	for _, raw := range keep {
		_ = k.publish(ctx, raw)
	}
}
