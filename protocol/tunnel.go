package protocol

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/multiformats/go-varint"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/overlayd/overlayd/protocol/pb"
)

// TunnelID is the stream protocol of tunnels: a connecting peer carries one
// TCP connection to a service another peer exposes. TunnelOpen, then
// TunnelOpenResponse, then (on TUNNEL_OK) TunnelFrames both ways. See the
// package documentation.
const TunnelID = "/overlayd/tunnel/1.0.0"

// Tunnel limits.
const (
	// MaxTunnelServiceName is the longest service name, in bytes.
	MaxTunnelServiceName = 64
	// TunnelIDLen is the length of a tunnel connection's ID.
	TunnelIDLen = 16
	// MaxTunnelDetail bounds the detail of an answer and the reason of a
	// reset, in bytes.
	MaxTunnelDetail = 256
	// MaxTunnelOpenFrame bounds TunnelOpen and TunnelOpenResponse.
	MaxTunnelOpenFrame = 512
	// MaxTunnelData is the most bytes one TunnelFrame carries.
	MaxTunnelData = 32 << 10
	// MaxTunnelFrame bounds a TunnelFrame: data plus its fields.
	MaxTunnelFrame = MaxTunnelData + MaxTunnelDetail + 64
)

// ValidServiceName reports whether name can name an exposed service: 1 to
// MaxTunnelServiceName bytes of letters, digits, '-', '_' and '.', so it
// is one path segment and one command-line word.
func ValidServiceName(name string) error {
	if name == "" || len(name) > MaxTunnelServiceName {
		return fmt.Errorf("service name %q: must be 1 to %d bytes", name, MaxTunnelServiceName)
	}
	for _, r := range name {
		ok := r == '-' || r == '_' || r == '.' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9')
		if !ok {
			return fmt.Errorf("service name %q: only letters, digits, '-', '_' and '.'", name)
		}
	}
	if name == "." || name == ".." {
		return fmt.Errorf("service name %q is reserved", name)
	}
	return nil
}

// CheckTunnelOpen checks a decoded TunnelOpen: a new connection names a
// valid service, every request carries a tunnel ID of TunnelIDLen bytes.
func CheckTunnelOpen(m *pb.TunnelOpen) error {
	if len(m.GetTunnelId()) != TunnelIDLen {
		return Reject(ReasonInvalid, "tunnel id: %d bytes, want %d", len(m.GetTunnelId()), TunnelIDLen)
	}
	if err := ValidServiceName(m.GetService()); err != nil {
		return Reject(ReasonInvalid, "%v", err)
	}
	if !m.GetResume() && m.GetReceived() != 0 {
		return Reject(ReasonInvalid, "received %d on a new connection", m.GetReceived())
	}
	return nil
}

// CheckTunnelFrame checks a decoded TunnelFrame against the limits.
func CheckTunnelFrame(m *pb.TunnelFrame) error {
	if len(m.GetData()) > MaxTunnelData {
		return Reject(ReasonOversize, "tunnel data: %d bytes, limit %d", len(m.GetData()), MaxTunnelData)
	}
	if len(m.GetReason()) > MaxTunnelDetail || !utf8.ValidString(m.GetReason()) {
		return Reject(ReasonInvalid, "tunnel reset reason: %d bytes", len(m.GetReason()))
	}
	if m.GetOffset() > 1<<62 {
		return Reject(ReasonInvalid, "tunnel offset %d", m.GetOffset())
	}
	return nil
}

// ShortDetail cuts s to MaxTunnelDetail bytes at a rune boundary.
func ShortDetail(s string) string {
	if len(s) <= MaxTunnelDetail {
		return s
	}
	s = s[:MaxTunnelDetail]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// TunnelFrameView is a decoded TunnelFrame whose Data aliases the buffer
// it was decoded from: the data path decodes and encodes TunnelFrames by
// hand (DecodeTunnelFrame, AppendTunnelFrame), without copying the data
// into a message. The bytes are TunnelFrame's protobuf encoding either way.
type TunnelFrameView struct {
	Offset     uint64
	Data       []byte
	CloseWrite bool
	Ack        uint64
	Reset      bool
	Reason     string
}

// DecodeTunnelFrame decodes b, one TunnelFrame without its length prefix,
// into f as proto.Unmarshal would (unknown fields and fields of an
// unexpected wire type are skipped, the last of a repeated field wins);
// f.Data aliases b. A body that does not decode is a *RejectError
// (undecodable). It does not check the limits: see CheckTunnelFrameView.
func DecodeTunnelFrame(b []byte, f *TunnelFrameView) error {
	*f = TunnelFrameView{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return Reject(ReasonUndecodable, "tunnel frame: %v", protowire.ParseError(n))
		}
		if num > protowire.MaxValidNumber {
			return Reject(ReasonUndecodable, "tunnel frame: field number %d", num)
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType && (num == 1 || num == 3 || num == 4 || num == 5):
			var v uint64
			v, n = protowire.ConsumeVarint(b)
			switch num {
			case 1:
				f.Offset = v
			case 3:
				f.CloseWrite = v != 0
			case 4:
				f.Ack = v
			case 5:
				f.Reset = v != 0
			}
		case typ == protowire.BytesType && (num == 2 || num == 6):
			var v []byte
			v, n = protowire.ConsumeBytes(b)
			if num == 2 {
				f.Data = v
			} else if n >= 0 && !utf8.Valid(v) {
				// proto.Unmarshal refuses a string field that is not
				// UTF-8 wherever it occurs, even if a later occurrence
				// replaces it.
				return Reject(ReasonUndecodable, "tunnel frame: reset reason is not UTF-8")
			} else {
				f.Reason = string(v)
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return Reject(ReasonUndecodable, "tunnel frame: %v", protowire.ParseError(n))
		}
		b = b[n:]
	}
	return nil
}

// CheckTunnelFrameView checks a decoded frame against the limits, as
// CheckTunnelFrame.
func CheckTunnelFrameView(f *TunnelFrameView) error {
	if len(f.Data) > MaxTunnelData {
		return Reject(ReasonOversize, "tunnel data: %d bytes, limit %d", len(f.Data), MaxTunnelData)
	}
	if len(f.Reason) > MaxTunnelDetail || !utf8.ValidString(f.Reason) {
		return Reject(ReasonInvalid, "tunnel reset reason: %d bytes", len(f.Reason))
	}
	if f.Offset > 1<<62 {
		return Reject(ReasonInvalid, "tunnel offset %d", f.Offset)
	}
	return nil
}

// AppendTunnelFrame appends f, length-prefixed, to b: the data path's
// encoder, one copy of the data (the two parts of data, a ring's wrap,
// are concatenated; f.Data is ignored). Zero fields are omitted, as
// proto.Marshal does.
func AppendTunnelFrame(b []byte, f *TunnelFrameView, data1, data2 []byte) []byte {
	size := 0
	varint := func(num protowire.Number, v uint64) {
		if v != 0 {
			size += protowire.SizeTag(num) + protowire.SizeVarint(v)
		}
	}
	varint(1, f.Offset)
	varint(3, b2u(f.CloseWrite))
	varint(4, f.Ack)
	varint(5, b2u(f.Reset))
	dl := len(data1) + len(data2)
	if dl > 0 {
		size += protowire.SizeTag(2) + protowire.SizeBytes(dl)
	}
	if f.Reason != "" {
		size += protowire.SizeTag(6) + protowire.SizeBytes(len(f.Reason))
	}
	b = protowire.AppendVarint(b, uint64(size))
	put := func(num protowire.Number, v uint64) {
		if v != 0 {
			b = protowire.AppendTag(b, num, protowire.VarintType)
			b = protowire.AppendVarint(b, v)
		}
	}
	put(1, f.Offset)
	if dl > 0 {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(dl))
		b = append(append(b, data1...), data2...)
	}
	put(3, b2u(f.CloseWrite))
	put(4, f.Ack)
	put(5, b2u(f.Reset))
	if f.Reason != "" {
		b = protowire.AppendTag(b, 6, protowire.BytesType)
		b = protowire.AppendString(b, f.Reason)
	}
	return b
}

func b2u(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// TunnelFrameReader reads length-prefixed TunnelFrames into one reused
// buffer: a frame's Data is valid until the next Read.
type TunnelFrameReader struct {
	r   *bufio.Reader
	buf []byte
}

// NewTunnelFrameReader reads TunnelFrames of at most MaxTunnelFrame bytes
// from r.
func NewTunnelFrameReader(r io.Reader) *TunnelFrameReader {
	return &TunnelFrameReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// Read reads one frame into f. A frame over MaxTunnelFrame is a
// *RejectError (oversize) and its body is not read; a body that does not
// decode is a *RejectError (undecodable); other errors come from the
// stream.
func (t *TunnelFrameReader) Read(f *TunnelFrameView) error {
	n, err := varint.ReadUvarint(t.r)
	if err != nil {
		if errors.Is(err, varint.ErrOverflow) || errors.Is(err, varint.ErrNotMinimal) {
			return Reject(ReasonUndecodable, "frame length: %v", err)
		}
		return err
	}
	if n > MaxTunnelFrame {
		return &RejectError{Reason: ReasonOversize, Err: fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, MaxTunnelFrame)}
	}
	if cap(t.buf) < int(n) {
		t.buf = make([]byte, MaxTunnelFrame)
	}
	b := t.buf[:n]
	if _, err := io.ReadFull(t.r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return DecodeTunnelFrame(b, f)
}
