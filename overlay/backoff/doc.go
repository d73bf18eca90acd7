// Package backoff is the client's retry policy: exponential backoff with full
// jitter, capped, honouring a supernode's retry-after hint without
// re-synchronising the clients that received it.
//
// The failure it prevents is the second half of Skype's December 2010
// outage: when a quarter of the supernodes fell over, the clients they served
// all retried at once, sent about 100x the normal load to the survivors and
// knocked those over in turn. A refusal ([capacity.BusyError] on the
// supernode side) only protects a supernode if the refused clients come back
// spread out, not as one wave.
//
// # The delay
//
// For attempt n (0 for the first retry after [Backoff.Reset]) and a
// retry-after hint r (0 if none; clamped to [0, Policy.MaxRetryAfter]):
//
//	c_n   = min(Policy.Max, Policy.Base * 2^n)   // exponential ceiling
//	w     = max(c_n, r)                          // jitter window
//	delay = r + uniform[0, w)                    // full jitter after the hint
//
// Without a hint this is AWS's "full jitter": uniform over [0, c_n), which
// spreads a burst of N clients evenly over the whole window instead of
// bunching them near c_n as "equal jitter" or no jitter would.
//
// With a hint the delay is never shorter than r (the supernode asked for
// that), and the clients refused at the same instant by the same supernode,
// who all got the same r, are spread over a window at least r wide. Adding a
// small fixed jitter to r (say uniform[0, Base)) would only shift the wave by
// r and squeeze it into Base; scaling the spread with r means a supernode
// that asks for a longer pause also gets a proportionally thinner return
// (N/r per unit of time). When the exponential ceiling has grown past r the
// window is c_n, so repeated refusals keep backing off.
//
// Bounds: r <= delay < r + max(c_n, r) <= MaxRetryAfter + max(Max,
// MaxRetryAfter); the delay is never negative; its mean doubles with each
// attempt until Max.
//
// # Contracts
//
//   - Pure: no goroutines, no timers, no clock. Next returns a duration and
//     the caller schedules the retry on its own (injected) clock.
//   - Randomness comes only from the *rand.Rand given to [New]. Each client
//     must seed its own source independently (for example from crypto/rand):
//     clients that share a seed draw the same delays and re-form the wave.
//     Tests pass a seeded source and are deterministic.
//   - A [Backoff] is not safe for concurrent use (neither is *rand.Rand):
//     one per client connection loop.
//   - [Fixed] is the naive strategy, kept for comparison in tests and
//     simulations: it honours retry-after and nothing else, so every client
//     refused together comes back together.
//
// [Stagger] spreads a planned move, such as returning to the home cluster
// after a failover, uniformly over a window.
//
// [capacity.BusyError]: https://pkg.go.dev/github.com/overlayd/overlayd/supernode/capacity#BusyError
package backoff
