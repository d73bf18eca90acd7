package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestOpenGarbageFile(t *testing.T) {
	big := make([]byte, 64<<10)
	for i := range big {
		big[i] = byte(i*7 + i>>8)
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"short text", []byte("hello, this is not a database\n")},
		{"one page of zeros", make([]byte, 4096)},
		{"64 KiB of pattern", big},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "store.db")
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(path, Limits{})
			if err == nil {
				_ = s.Close()
				t.Fatal("Open of a garbage file succeeded")
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open = %v, want ErrCorrupt", err)
			}
			if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, "move it aside") {
				t.Fatalf("error %q does not name the path and what to do", msg)
			}
			after, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(after, tc.data) {
				t.Fatalf("the file changed (%d -> %d bytes, %v)", len(tc.data), len(after), err)
			}
		})
	}
}

// writeBolt creates a bbolt file at path and runs fill in one update.
func writeBolt(t *testing.T, path string, fill func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(fill); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenUndecodableRecord(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bucket []byte
		k, v   []byte
	}{
		{"offline record truncated", bucketOffline, offlineKey("bob", 1), []byte{recordVersion, kindOffline, 3, 'a'}},
		{"offline record of the wrong kind", bucketOffline, offlineKey("bob", 1), encodeReplay(1, []byte("x"))},
		{"offline key", bucketOffline, []byte("junk"), encodeOffline("amy", []byte("i"), 1, []byte("x"))},
		{"replay record version", bucketReplay, replayKey("g", 1, 1), []byte{9, kindReplay, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"replay key", bucketReplay, []byte{0, 1, 'g'}, encodeReplay(1, []byte("x"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := openTest(t, Limits{})
			ts.mustPut(t, ts.msg("bob", "amy", 1))
			if err := ts.Close(); err != nil {
				t.Fatal(err)
			}
			writeBolt(t, ts.path, func(tx *bolt.Tx) error { return tx.Bucket(tc.bucket).Put(tc.k, tc.v) })
			before, err := os.ReadFile(ts.path)
			if err != nil {
				t.Fatal(err)
			}
			s, err := Open(ts.path, Limits{})
			if err == nil {
				_ = s.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), ts.path) {
				t.Fatalf("Open = %v, want ErrCorrupt naming %s", err, ts.path)
			}
			if after, _ := os.ReadFile(ts.path); !bytes.Equal(after, before) {
				t.Fatal("Open changed the file it refused")
			}
		})
	}
}

func TestOpenForeignBolt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	writeBolt(t, path, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("someone-else"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), []byte("v"))
	})
	before, _ := os.ReadFile(path)
	if _, err := Open(path, Limits{}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "not an overlayd store") {
		t.Fatalf("Open of another program's bbolt file = %v, want ErrCorrupt", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Fatal("Open changed another program's file")
	}
}

func TestOpenLocked(t *testing.T) {
	ts := openTest(t, Limits{})
	start := time.Now()
	s, err := Open(ts.path, Limits{}, WithLockTimeoutForTest(100*time.Millisecond))
	if err == nil {
		_ = s.Close()
		t.Fatal("a second Open of an open store succeeded")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("second Open took %v", took)
	}
	if !strings.Contains(err.Error(), "locked by another process") || !strings.Contains(err.Error(), ts.path) {
		t.Fatalf("second Open = %v, want a clear locked error", err)
	}
	if errors.Is(err, ErrCorrupt) {
		t.Fatalf("a locked file reported as corrupt: %v", err)
	}
	// The first store is unaffected.
	ts.mustPut(t, ts.msg("bob", "amy", 1))
}

func TestOpenLimits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lim   Limits
		field string
	}{
		{"max bytes", Limits{MaxBytes: -1}, "MaxBytes"},
		{"recipient count", Limits{OfflinePerRecipient: Quota{Count: -1}}, "OfflinePerRecipient"},
		{"sender bytes", Limits{OfflinePerSender: Quota{Bytes: -1}}, "OfflinePerSender"},
		{"replay age", Limits{ReplayMaxAge: -time.Second}, "ReplayMaxAge"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "store.db")
			if _, err := Open(path, tc.lim); err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Open = %v, want an error naming %s", err, tc.field)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("Open with bad limits created the file: %v", err)
			}
		})
	}
	ts := openTest(t, Limits{ReplayMaxAge: time.Minute})
	want := DefaultLimits()
	want.ReplayMaxAge = time.Minute
	if ts.limits() != want {
		t.Fatalf("limits = %+v, want %+v", ts.limits(), want)
	}
}

func TestOpenFileMode(t *testing.T) {
	ts := openTest(t, Limits{})
	fi, err := os.Stat(ts.path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v, want 0600", fi.Mode().Perm())
	}
}

func TestClosed(t *testing.T) {
	ts := openTest(t, Limits{})
	ts.mustAppend(t, "g", entry(1, 1))
	if err := ts.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ts.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close = %v, want ErrClosed", err)
	}
	if _, err := ts.PutOffline(ts.msg("bob", "amy", 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("PutOffline = %v", err)
	}
	if _, err := ts.Offline("bob", 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Offline = %v", err)
	}
	if _, err := ts.DeleteOffline("bob", "amy", []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("DeleteOffline = %v", err)
	}
	if err := ts.AppendReplay("g", entry(1, 2)); !errors.Is(err, ErrClosed) {
		t.Fatalf("AppendReplay = %v", err)
	}
	if _, _, err := ts.Expire(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Expire = %v", err)
	}
	if err := ts.Flush(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Flush = %v", err)
	}
}
