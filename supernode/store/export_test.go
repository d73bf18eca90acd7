package store

import "time"

// WithFlushHookForTest calls f after every replay flush with the number
// of keys written and the error.
func WithFlushHookForTest(f func(n int, err error)) Option {
	return func(o *options) { o.onFlush = f }
}

// WithLockTimeoutForTest shortens bbolt's file-lock wait.
func WithLockTimeoutForTest(d time.Duration) Option {
	return func(o *options) { o.lockTimeout = d }
}

// OfflineSizeForTest is what one offline message is charged.
func OfflineSizeForTest(o Offline) int64 {
	return offlineSize(o.Recipient, o.Sender, len(o.ID), len(o.Data))
}

// ReplaySizeForTest is what one replay entry is charged.
func ReplaySizeForTest(group string, dataLen int) int64 { return replaySize(group, dataLen) }
