package store

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// On-disk encoding. Values are records the store encodes itself around the
// caller's opaque bytes; keys carry the identifying fields so that bbolt's
// byte order is the order the store needs.
//
// A record starts with a version byte and a kind byte:
//
//	offline: 0x01 'O' uvarint(len sender) sender uvarint(len id) id
//	         int64-BE expires (unix ns) data (the rest, non-empty)
//	replay:  0x01 'R' int64-BE at (unix ns) data (the rest, may be empty)
//
// Key components are prefixed with a 2-byte big-endian length, so a prefix
// of one component never matches a longer one.

const (
	recordVersion = 1
	kindOffline   = 'O'
	kindReplay    = 'R'

	maxPeerLen  = 256 // recipient, sender
	maxIDLen    = 64
	maxGroupLen = 256
)

// record is a decoded value.
type record struct {
	kind    byte
	sender  string // offline
	id      []byte // offline
	expires int64  // offline, unix ns
	at      int64  // replay, unix ns
	data    []byte
}

var errShort = errors.New("truncated")

func encodeOffline(sender string, id []byte, expires int64, data []byte) []byte {
	b := make([]byte, 0, 2+2*binary.MaxVarintLen64+len(sender)+len(id)+8+len(data))
	b = append(b, recordVersion, kindOffline)
	b = binary.AppendUvarint(b, uint64(len(sender)))
	b = append(b, sender...)
	b = binary.AppendUvarint(b, uint64(len(id)))
	b = append(b, id...)
	b = binary.BigEndian.AppendUint64(b, uint64(expires))
	return append(b, data...)
}

func encodeReplay(at int64, data []byte) []byte {
	b := make([]byte, 0, 2+8+len(data))
	b = append(b, recordVersion, kindReplay)
	b = binary.BigEndian.AppendUint64(b, uint64(at))
	return append(b, data...)
}

// decodeRecord decodes a value read from disk. The bytes are untrusted
// input: it never panics, and every failure is an error (wrapped in
// ErrCorrupt by callers). The returned slices alias b.
func decodeRecord(b []byte) (record, error) {
	var r record
	if len(b) < 2 {
		return r, errShort
	}
	if b[0] != recordVersion {
		return r, fmt.Errorf("unknown record version %d", b[0])
	}
	r.kind = b[1]
	b = b[2:]
	switch r.kind {
	case kindOffline:
		sender, rest, err := lengthPrefixed(b, maxPeerLen)
		if err != nil {
			return r, fmt.Errorf("offline sender: %w", err)
		}
		id, rest, err := lengthPrefixed(rest, maxIDLen)
		if err != nil {
			return r, fmt.Errorf("offline id: %w", err)
		}
		if len(sender) == 0 || len(id) == 0 {
			return r, errors.New("offline: empty sender or id")
		}
		if len(rest) < 8 {
			return r, fmt.Errorf("offline expires: %w", errShort)
		}
		r.sender, r.id = string(sender), id
		r.expires = int64(binary.BigEndian.Uint64(rest))
		r.data = rest[8:]
		if len(r.data) == 0 {
			return r, errors.New("offline: empty data")
		}
	case kindReplay:
		if len(b) < 8 {
			return r, fmt.Errorf("replay at: %w", errShort)
		}
		r.at = int64(binary.BigEndian.Uint64(b))
		r.data = b[8:]
	default:
		return r, fmt.Errorf("unknown record kind 0x%02x", r.kind)
	}
	return r, nil
}

// lengthPrefixed reads a uvarint length (at most max) and that many bytes.
func lengthPrefixed(b []byte, max int) (field, rest []byte, err error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, nil, errors.New("bad length")
	}
	if n > uint64(max) {
		return nil, nil, fmt.Errorf("length %d exceeds %d", n, max)
	}
	b = b[k:]
	if uint64(len(b)) < n {
		return nil, nil, errShort
	}
	return b[:n], b[n:], nil
}

// appendComponent appends a 2-byte length and s.
func appendComponent(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// component splits one length-prefixed key component off b.
func component(b []byte) (field, rest []byte, ok bool) {
	if len(b) < 2 {
		return nil, nil, false
	}
	n := int(binary.BigEndian.Uint16(b))
	if len(b)-2 < n {
		return nil, nil, false
	}
	return b[2 : 2+n], b[2+n:], true
}

// offlineKey is recipient || seq: a recipient's messages sort in put order.
func offlineKey(recipient string, seq uint64) []byte {
	b := appendComponent(make([]byte, 0, 2+len(recipient)+8), recipient)
	return binary.BigEndian.AppendUint64(b, seq)
}

func parseOfflineKey(k []byte) (recipient string, seq uint64, ok bool) {
	r, rest, ok := component(k)
	if !ok || len(r) == 0 || len(r) > maxPeerLen || len(rest) != 8 {
		return "", 0, false
	}
	return string(r), binary.BigEndian.Uint64(rest), true
}

// idKey is recipient || sender || id, the idempotence index; its value is
// the 8-byte sequence.
func idKey(recipient, sender string, id []byte) []byte {
	b := make([]byte, 0, 4+len(recipient)+len(sender)+len(id))
	b = appendComponent(b, recipient)
	b = appendComponent(b, sender)
	return append(b, id...)
}

// expKey is expires || seq, the expiry index; its value is the offline key.
func expKey(expires int64, seq uint64) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(expires))
	return binary.BigEndian.AppendUint64(b, seq)
}

// replayKey is group || epoch || seq: a group's log sorts in (epoch, seq)
// order.
func replayKey(group string, epoch, seq uint64) []byte {
	b := appendComponent(make([]byte, 0, 2+len(group)+16), group)
	b = binary.BigEndian.AppendUint64(b, epoch)
	return binary.BigEndian.AppendUint64(b, seq)
}

func parseReplayKey(k []byte) (group string, epoch, seq uint64, ok bool) {
	g, rest, ok := component(k)
	if !ok || len(g) == 0 || len(g) > maxGroupLen || len(rest) != 16 {
		return "", 0, 0, false
	}
	return string(g), binary.BigEndian.Uint64(rest), binary.BigEndian.Uint64(rest[8:]), true
}

// offlineSize is what one offline message costs: the keys and values of
// its three records (message, id index, expiry index).
func offlineSize(recipient, sender string, idLen, dataLen int) int64 {
	msgK := 2 + len(recipient) + 8
	msgV := 2 + uvarintLen(len(sender)) + len(sender) + uvarintLen(idLen) + idLen + 8 + dataLen
	idK := 4 + len(recipient) + len(sender) + idLen
	idV := 8
	expK := 16
	expV := msgK
	return int64(msgK + msgV + idK + idV + expK + expV)
}

// replaySize is what one replay entry costs: its key and value.
func replaySize(group string, dataLen int) int64 {
	return int64(2+len(group)+16) + int64(2+8+dataLen)
}

func uvarintLen(n int) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutUvarint(buf[:], uint64(n))
}
