// Package fanout is the supernode's local fanout engine: it delivers one
// group message to every local member of the group, possibly tens of
// thousands of them, without encoding it more than once and without letting
// one slow member hold up the others.
//
// The design follows Discord's Manifold. Sending to each member one after
// another from the goroutine that owns the group costs one encode and one
// hand-off per member, all on one core; Discord measured 900 ms to 2.1 s per
// event in their 30,000-member guilds. Manifold partitions the members across
// one worker per core and hands each worker the message once. Here the caller
// encodes the message once into a frame, and [Engine.Fanout] gives the same
// frame to a fixed pool of workers (one per GOMAXPROCS by default), each of
// which offers it to its share of the members.
//
// # Pieces
//
//   - [Engine] owns the workers and a bounded job queue. [Engine.Fanout]
//     submits one frame for one [Group] and returns at once; the optional done
//     callback reports a [Result] when every worker has finished.
//   - [Group] is a copy-on-write set of members partitioned by worker.
//     [Group.Add] and [Group.Remove] publish a new immutable partition
//     atomically; [Engine.Fanout] reads the partition without a lock.
//   - [Sink] is a member's outbound queue: one non-blocking Offer per frame.
//     [Outbox] is the production Sink: a bounded queue drained into an
//     io.Writer (a stream), with a gap notice on overflow, by a writer
//     goroutine of its own or by a shared [Writers] pool. A writer that
//     finds several frames queued writes them in one Write ([WithCoalesce]).
//   - [Writers] is a pool of writer goroutines (one per GOMAXPROCS by
//     default) shared by many Outboxes ([WithWriters]): an idle member costs
//     no goroutine, and a fanout to 30,000 members wakes a few pool
//     goroutines instead of 30,000. A watchdog replaces a pool goroutine
//     blocked in one Write for two checks ([DefaultStallCheck]), so a member
//     that does not read delays no other member.
//
// # Ordering
//
// A member always lands on the same worker: [Engine.Worker] maps its ID to a
// worker with a fixed hash of the ID and the worker count (the same in every
// process), and each worker processes its jobs in the order they were queued.
// A job for one group is queued on every worker that serves one of its
// members, under a short per-group lock. Hence:
//
//   - if one call to Fanout for a group happens before another (for example,
//     both from the goroutine that owns the group), every member that receives
//     both is offered them in that order;
//   - concurrent calls for the same group are ordered arbitrarily but
//     identically for every member: all members of a group see its messages in
//     one common order;
//   - a member that belongs to several groups under the same ID is on the same
//     worker in all of them, so the first rule holds across those groups too.
//
// Membership is sampled when Fanout is called: a member added after Fanout
// returned never receives that frame, and a member removed after it returned
// may still receive it. A Sink must therefore accept (and may refuse) Offers
// after its member was removed; an [Outbox] refuses them once closed.
//
// # Frame ownership
//
// The frame passed to Fanout is shared, not copied: the same slice is offered
// to every member, and an Outbox keeps it until it has been written, which for
// a stalled member is until the Outbox is closed. From the call on, the caller
// must never modify the frame or return it to a buffer pool. Sinks must not
// modify it either. The engine itself drops its reference when the job's done
// callback has returned.
//
// # Back-pressure and overflow
//
// Nothing in this package blocks on a member or grows without bound:
//
//   - The engine admits at most [WithMaxJobs] jobs in flight (queued or being
//     offered). Past that, Fanout refuses with [ErrBusy] before doing any
//     work, so that the caller can answer BUSY upstream. Job records are
//     preallocated, so Fanout allocates nothing, whatever the group size, and
//     the caller waits only for two short locks while the job's pointer is
//     queued on each worker, never for an Offer.
//   - A worker yields its core every [DefaultYieldEvery] Offers (see
//     [WithYieldEvery]) so that the writer goroutines its Offers woke, and
//     other goroutines on its core, are not held up for a whole partition.
//   - A [Sink] must not block: it enqueues the frame or returns false. A
//     false Offer is counted as a drop in the [Result] and the metrics; the
//     engine never retries.
//   - An [Outbox] holds at most its limit of frames, counting the ones being
//     written. When it is full it drops the newest frame ("drop newest") and
//     counts it. The first time its writer gets past the frames queued before
//     the drops, it writes a gap notice produced by [WithGapFrame] with the
//     number of frames dropped, so the member learns exactly where and how
//     much it missed, and then continues with newer frames. A writer blocked
//     forever in Write therefore costs at most limit frame references and a
//     counter; it delays nobody else: with a [Writers] pool, the goroutine
//     blocked in its Write is replaced within two watchdog checks and the
//     others go on (see [Writers] for the argument and its bound).
//
// # Lifecycle
//
// [New], [NewOutbox] and [NewWriters] start nothing; [Engine.Start] (one
// goroutine per worker), [Outbox.Start] (one writer goroutine, or none with a
// pool) and [Writers.Start] (the pool's goroutines and its watchdog) start
// the goroutines, and Close (idempotent) stops them and waits for them. Close
// a pool's Outboxes before the pool. The engine reads the
// clock only for its latency histogram (time.Now unless [WithClock]); the
// Outbox never does and sets no deadline: a write deadline, if any, is set on
// the io.Writer by its owner.
// Engine.Close lets every accepted job finish, so each accepted job's done
// callback runs exactly once. Outbox.Close discards unwritten frames and can
// unblock a stuck Write through [WithAbort]; [Outbox.Done] reports a writer
// stopped by a Write error, so that its owner can remove the member.
//
// # Use in the supernode
//
// Package supernode makes one [Outbox] per attached client (limit
// supernode.OutboxLimit, 1024 frames) on the client's attach stream, with a gap
// frame that is the protocol's SessionFrame{gap: Gap{dropped}} and an abort
// that resets the stream; every frame to that client, not only group messages,
// goes through it. Package node gives the supernode one [Writers] pool
// (GOMAXPROCS goroutines) that writes every session's Outbox, closed after
// the sessions. A supernode keeps one [Group] per group that has members
// attached to it and, for each group message it receives from the group's home
// (or numbers as the home), encodes one SessionFrame and calls [Engine.Fanout]
// once; a refused Fanout drops that message for its local members (counted).
//
// # Metrics
//
// The engine registers on the registerer given with [WithRegisterer]; there
// is no global registry and no per-member label:
//
//	overlayd_supernode_fanout_jobs_total             counter   jobs accepted by Fanout
//	overlayd_supernode_fanout_jobs_refused_total     counter   Fanout calls refused with ErrBusy
//	overlayd_supernode_fanout_jobs_in_flight         gauge     jobs queued or being offered
//	overlayd_supernode_fanout_frames_offered_total   counter   Offer calls (one per member per job)
//	overlayd_supernode_fanout_frames_dropped_total   counter   Offers refused by a full (or closed) sink
//	overlayd_supernode_fanout_latency_seconds        histogram Fanout call to the last worker done
package fanout
