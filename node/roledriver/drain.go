package roledriver

import (
	"context"
	"log/slog"
	"time"

	"github.com/overlayd/overlayd/node/role"
)

// Drain detaches the clients of adm above keep in ten even steps over
// period (longer if detached clients are slow to leave, see waitStep);
// each Detach spreads its client's move over one step, so they never all
// move in the same instant. each, if set, is told the load before every
// step and once at the end. It returns early when ctx ends. A demoted
// auto node drains to 0; a demoted mega-supernode hands back the clients
// above its regular capacity.
func Drain(ctx context.Context, adm Admission, period time.Duration, keep int, reason string, each func(load int), log *slog.Logger) {
	step := role.DrainStepInterval(period)
	for i := range role.DrainSteps {
		load := adm.Load()
		if each != nil {
			each(load)
		}
		excess := load - keep
		if excess <= 0 {
			return
		}
		k := adm.Drain(role.DrainStep(excess, i), reason, step)
		log.Debug("drain step", "step", i, "detached", k, "load", load, "reason", reason)
		if !waitStep(ctx, adm, step, load-k, log) {
			return
		}
	}
	if each != nil {
		each(adm.Load())
	}
}

// drainLinger bounds how long a drain step waits, past its interval, for
// the clients it detached to leave: the admission ends a detached session
// within a second (its read deadline), so a client still there after
// drainLinger is stuck, and the drain goes on without it.
const drainLinger = 2 * time.Second

// waitStep waits one drain step and then, for at most drainLinger,
// until the load is at most target, the load before the step less the
// clients it detached, or until ctx ends (false). The next step counts the
// load again: a client still closing its session would be counted as
// excess a second time (a later step then detached two clients at once)
// and could be picked again instead of another client. The load only falls
// during a drain (admission is closed, or the semaphore is past its limit),
// so the wait ends as soon as the last of them has left.
func waitStep(ctx context.Context, adm Admission, step time.Duration, target int, log *slog.Logger) bool {
	t := time.NewTimer(step)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	if adm.Load() <= target {
		return true
	}
	linger := time.NewTimer(drainLinger)
	defer linger.Stop()
	poll := time.NewTicker(max(step/10, time.Millisecond))
	defer poll.Stop()
	for adm.Load() > target {
		select {
		case <-ctx.Done():
			return false
		case <-linger.C:
			log.Debug("drain step: detached clients still attached", "load", adm.Load(), "want", target)
			return true
		case <-poll.C:
		}
	}
	return true
}
