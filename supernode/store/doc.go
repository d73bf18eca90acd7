// Package store is the supernode's embedded on-disk store (issue 15,
// no-loss messaging). It keeps two things in one file in the data dir:
//
//   - Offline direct messages held for recipients that are not attached
//     (store-and-forward): [Store.PutOffline], [Store.Offline],
//     [Store.DeleteOffline]. A put is durable when it returns: committed
//     and fsynced (concurrent puts share one commit through bbolt's
//     Batch). Only per-recipient and per-sender counters are in memory;
//     the messages stay on disk, listed in put order (a per-store sequence
//     is part of the key, so the order survives restarts).
//   - Per-group replay logs of numbered group messages, so members can
//     resume: [Store.AppendReplay], [Store.ReplayAfter]. They are held in
//     memory and written behind by a background flusher, one transaction
//     per flush interval (default 20ms). A crash loses at most one flush
//     interval of appends; replication across the group's home cluster
//     covers that. Close flushes.
//
// The values are opaque bytes (the caller encodes protobufs); the store
// wraps them in small records of its own (record.go) and treats every byte
// it reads back as untrusted input. A file that is not a valid store, or
// holds a record that does not decode, makes Open fail with [ErrCorrupt]:
// the store never wipes or repairs a file itself.
//
// Bounds ([Limits]): MaxBytes over everything; per-recipient and
// per-sender quotas on offline messages (refused with [ErrOverQuota],
// [ErrFull] past MaxBytes, before anything is written); per-group count
// and bytes, a maximum age and a total for the replay logs (trimmed
// oldest-first, never refused unless offline messages fill MaxBytes). The
// total bounds the memory the logs take. Bytes are counted as
// len(key)+len(value) of the records written; the file itself is larger
// by bbolt's page, branch and freelist overhead, and does not shrink when
// records are deleted (bbolt reuses the freed pages).
//
// Why bbolt (go.etcd.io/bbolt): pure Go, so the binary stays a static
// CGO_ENABLED=0 build; one file; ACID transactions with fsync on commit; a
// small dependency tree; maintained by etcd. Pebble pulls a much larger
// tree and brings an LSM we do not need at these sizes.
//
// The store reads time only through the clock given with [WithClock]. Its
// one goroutine, the replay flusher, is owned by the [Store] and stopped by
// [Store.Close].
package store
