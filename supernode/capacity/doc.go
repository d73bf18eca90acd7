// Package capacity implements the supernode's capacity semaphores: atomic,
// fail-fast admission counters that guard every expensive resource a
// supernode hands out (attached peers, relays in flight, lookups in flight,
// fanout jobs in flight).
//
// The design follows Discord's Semaphore library: a counter that is updated
// atomically by whoever wants a slot, with no owner process, no queue and no
// lock. Past its maximum a [Semaphore] refuses at once with a preallocated
// [*BusyError] carrying a retry-after hint, instead of queueing callers until
// memory runs out. This is what lets a supernode survive the 100x reconnect
// storm of Skype's December 2010 outage: the supernode protects itself
// before it allocates any per-peer state, and clients (see package
// overlay/backoff) spread their retries.
//
// # Contracts
//
//   - [Semaphore.TryAcquire], [Semaphore.Release] and [Semaphore.Do] never
//     block, never queue, never allocate (including the BUSY path of Do) and
//     take no lock. They are safe for concurrent use.
//   - As long as every Release matches a successful TryAcquire, the number
//     of slots held never exceeds the maximum in force when each slot was
//     acquired. Lowering the maximum with [Semaphore.SetMax] evicts
//     nobody: new acquisitions are refused until enough slots are released.
//   - Releasing a slot that is not held never drives the counter negative: it
//     returns [ErrNotHeld], changes nothing and is counted in
//     overlayd_supernode_semaphore_unheld_releases_total so that the bug is
//     visible in production.
//   - [Semaphore.Do] releases its slot when fn returns and also when fn
//     panics (the panic continues); a leaked slot would otherwise shrink the
//     capacity for the lifetime of the process.
//   - The [*BusyError] returned by one semaphore is shared by all its
//     refusals (that is what keeps refusal allocation-free); treat it as
//     read-only. errors.Is(err, [ErrBusy]) and errors.As(err, **BusyError)
//     both work on it and on errors that wrap it.
//
// # Metrics
//
// A [Semaphore] is a prometheus.Collector. The counters live in the
// semaphore as atomics and are only read when the registry is scraped, so
// the hot path never touches a Prometheus object. Register the semaphores of
// one supernode on that supernode's injected registerer with [Register] or
// [Set.Register]; there is no global registry. Every series carries the
// label semaphore=<name>; names are a small fixed set (see [Set]), never a
// peer ID.
//
//	overlayd_supernode_semaphore_in_use                  gauge
//	overlayd_supernode_semaphore_max                     gauge
//	overlayd_supernode_semaphore_acquired_total          counter
//	overlayd_supernode_semaphore_refused_total           counter
//	overlayd_supernode_semaphore_unheld_releases_total   counter
//
// # Defaults
//
// [DefaultLimits] derives the four limits of a supernode from its announced
// capacity (the number of peers it will attach); [NewSet] builds the four
// semaphores and [Set.SetLimits] resizes them at runtime, for example when a
// node is promoted to mega-supernode or demoted again.
package capacity
