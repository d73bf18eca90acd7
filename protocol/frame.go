package protocol

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/multiformats/go-varint"
	"google.golang.org/protobuf/proto"
)

// Stream framing: every message on an overlayd stream is a protobuf message
// prefixed by its length as an unsigned varint (the framing go-libp2p's own
// protocols use). A reader refuses a length above its limit before reading
// the body.

// Frame size limits per stream protocol, in bytes.
const (
	// MaxAttachFrame bounds AttachRequest, AttachResponse and SessionFrame.
	MaxAttachFrame = 4 << 10
)

// ErrFrameTooLarge is wrapped by a *RejectError of reason oversize when a
// frame's declared length is above the reader's limit.
var ErrFrameTooLarge = errors.New("frame too large")

// FrameReader reads length-prefixed messages from a stream.
type FrameReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewFrameReader reads frames of at most max bytes from r.
func NewFrameReader(r io.Reader, max int) *FrameReader {
	return &FrameReader{r: bufio.NewReaderSize(r, min(max+varint.MaxLenUvarint63, 4096)), max: max}
}

// Read reads one frame into m. A frame over the limit is a *RejectError
// (oversize) and its body is not read; a body that does not decode is a
// *RejectError (undecodable); other errors come from the stream.
func (f *FrameReader) Read(m proto.Message) error {
	n, err := varint.ReadUvarint(f.r)
	if err != nil {
		if errors.Is(err, varint.ErrOverflow) || errors.Is(err, varint.ErrNotMinimal) {
			return Reject(ReasonUndecodable, "frame length: %v", err)
		}
		return err
	}
	if n > uint64(f.max) {
		return &RejectError{Reason: ReasonOversize, Err: fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, f.max)}
	}
	if cap(f.buf) < int(n) {
		f.buf = make([]byte, n)
	}
	b := f.buf[:n]
	if _, err := io.ReadFull(f.r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return Reject(ReasonUndecodable, "frame: %v", err)
	}
	return nil
}

// AppendFrame appends m, length-prefixed, to b.
func AppendFrame(b []byte, m proto.Message) ([]byte, error) {
	size := proto.Size(m)
	b = binary.AppendUvarint(b, uint64(size))
	return proto.MarshalOptions{}.MarshalAppend(b, m)
}

// WriteFrame writes m, length-prefixed, to w in one write.
func WriteFrame(w io.Writer, m proto.Message) error {
	b, err := AppendFrame(make([]byte, 0, 64), m)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
