package store

import (
	"bytes"
	"testing"
)

// FuzzDecodeRecord feeds arbitrary bytes, as read from a damaged or hostile
// file, to the record and key decoders: they must never panic, and what
// they accept must encode back to a value that decodes to the same record.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeOffline("amy", []byte("id-1"), 1767225600000000000, []byte("hello")))
	f.Add(encodeOffline(string(make([]byte, 256)), make([]byte, 64), -1, []byte{0}))
	f.Add(encodeReplay(1767225600000000000, []byte("group message")))
	f.Add(encodeReplay(0, nil))
	f.Add([]byte{})
	f.Add([]byte{recordVersion})
	f.Add([]byte{recordVersion, kindOffline, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{recordVersion, kindOffline, 3, 'a', 'm', 'y', 70, 'x'})
	f.Add([]byte{recordVersion, 'X', 0})
	f.Add(offlineKey("bob", 7))
	f.Add(replayKey("g", 1, 2))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseOfflineKey(b)
		parseReplayKey(b)
		r, err := decodeRecord(b)
		if err != nil {
			return
		}
		var again []byte
		switch r.kind {
		case kindOffline:
			again = encodeOffline(r.sender, r.id, r.expires, r.data)
		case kindReplay:
			again = encodeReplay(r.at, r.data)
		default:
			t.Fatalf("decoded unknown kind 0x%02x", r.kind)
		}
		r2, err := decodeRecord(again)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if r2.kind != r.kind || r2.sender != r.sender || !bytes.Equal(r2.id, r.id) ||
			r2.expires != r.expires || r2.at != r.at || !bytes.Equal(r2.data, r.data) {
			t.Fatalf("round trip: %+v -> %+v", r, r2)
		}
	})
}
