// Package capacity implements the supernode's capacity semaphores: atomic,
// fail-fast admission counters that guard every expensive resource a
// supernode hands out (attached peers, direct messages being relayed, the
// lookups it makes, group publishes being numbered). Its types are
// [Semaphore], the [Set] of the four a supernode uses with their [Limits],
// and the [*BusyError] a full semaphore refuses with. It starts no
// goroutines, reads no clock and takes no lock.
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
//   - A caller takes its slot before it allocates anything for the request
//     it guards, so a refusal costs the supernode no per-peer state.
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
// # The four semaphores of a supernode
//
// Package supernode takes them as follows (the wire answers are specified in
// package protocol):
//
//   - attached_peers ([Set.Attached]): one slot per attached client, taken by
//     the attach handler before the session is allocated (a client that
//     reattaches takes its old session's slot over) and released when the
//     session ends. Refused: the client gets a BUSY AttachResponse whose
//     retry_after_ms is the node's --busy-retry-after, the value the node
//     also gives these semaphores with [WithRetryAfter].
//   - relays ([Set.Relays]): one slot per direct message a client sends, and
//     per re-route after a nack, held while the message is located and until
//     it is delivered locally or queued on a link to the recipient's
//     supernode (not until the acknowledgement). Refused: the client gets a
//     Result of status BUSY (a nack is dropped). The node also bounds its
//     circuit relay's circuits by RelaysInFlight, counted apart from this
//     semaphore.
//   - lookups ([Set.Lookups]): one slot for each lookup a supernode makes,
//     locating a client in its home cluster (one slot for all the home
//     members it asks) or asking a group's home for its members. Refused:
//     the client is treated as not found (OFFLINE for a send) or gets the
//     error "supernode busy". Lookups a supernode serves to others take no
//     slot.
//   - fanout_jobs ([Set.Fanout]): one slot per publish a group home numbers,
//     held while it numbers the message and queues it on its links and into
//     the local fanout. Refused: a Result of status BUSY, before a sequence
//     number is spent. The local fanout engine (package fanout) bounds its
//     own jobs separately.
//
// Only the attach refusal carries a retry-after on the wire; the name of the
// refusing semaphore ([BusyError].Resource) is not sent to the peer.
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
// [RefusalCollector] adds refusals made by a limit that another library
// enforces to the refused_total family under a name of its own (the node
// counts go-libp2p's circuit relay refusals as relay_reservation and
// relay_circuit).
//
// # Defaults
//
// [DefaultLimits] derives the four limits of a supernode from its announced
// capacity (the number of peers it will attach); [NewSet] builds the four
// semaphores and [Set.SetLimits] resizes them at runtime, for example when a
// node is promoted to mega-supernode or demoted again.
package capacity
