package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/overlayd/overlayd/protocol/pb"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	in := []*pb.SessionFrame{
		{Kind: &pb.SessionFrame_Ping{Ping: &pb.Ping{Seq: 1}}},
		{Kind: &pb.SessionFrame_Pong{Pong: &pb.Pong{Seq: 1}}},
		{Kind: &pb.SessionFrame_Detach{Detach: &pb.Detach{Reason: "draining", SpreadMs: 500}}},
	}
	for _, m := range in {
		if err := WriteFrame(&buf, m); err != nil {
			t.Fatal(err)
		}
	}
	r := NewFrameReader(&buf, MaxAttachFrame)
	for i := range in {
		var got pb.SessionFrame
		if err := r.Read(&got); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	var m pb.SessionFrame
	if err := r.Read(&m); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}
}

// countingReader counts the bytes taken from it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestFrameTooLargeNotRead(t *testing.T) {
	// A frame that claims 1 GiB: the reader must refuse it from the length
	// alone, without reading (or allocating) the body.
	hdr := binary.AppendUvarint(nil, 1<<30)
	body := bytes.Repeat([]byte{0}, 1<<20)
	cr := &countingReader{r: io.MultiReader(bytes.NewReader(hdr), bytes.NewReader(body))}
	r := NewFrameReader(cr, MaxAttachFrame)
	var m pb.AttachRequest
	err := r.Read(&m)
	if !errors.Is(err, ErrFrameTooLarge) || ReasonOf(err) != ReasonOversize {
		t.Fatalf("err = %v, want frame too large", err)
	}
	if cr.n > 4096+len(hdr) {
		t.Fatalf("read %d bytes of an oversize frame", cr.n)
	}
}

func TestFrameErrors(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want Reason
		eof  bool
	}{
		{"truncated body", append(binary.AppendUvarint(nil, 10), 1, 2), "", true},
		{"garbage body", append(binary.AppendUvarint(nil, 3), 0xff, 0xff, 0xff), ReasonUndecodable, false},
		{"overlong varint", bytes.Repeat([]byte{0xff}, 11), ReasonUndecodable, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m pb.AttachResponse
			err := NewFrameReader(bytes.NewReader(tt.data), MaxAttachFrame).Read(&m)
			if tt.eof {
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("err = %v, want unexpected EOF", err)
				}
				return
			}
			if ReasonOf(err) != tt.want {
				t.Fatalf("err = %v, want reason %q", err, tt.want)
			}
		})
	}
}

func FuzzFrameReader(f *testing.F) {
	b, _ := AppendFrame(nil, &pb.AttachResponse{Status: pb.AttachResponse_STATUS_BUSY, RetryAfterMs: 1000,
		Alternatives: []*pb.PeerAddrs{{PeerId: []byte("x"), Addrs: [][]byte{{4, 127, 0, 0, 1}}}}})
	f.Add(b)
	b, _ = AppendFrame(nil, &pb.SessionFrame{Kind: &pb.SessionFrame_Ping{Ping: &pb.Ping{Seq: 9}}})
	f.Add(b)
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewFrameReader(bytes.NewReader(data), MaxAttachFrame)
		for range 4 {
			var resp pb.AttachResponse
			if err := r.Read(&resp); err != nil {
				return
			}
			_ = PeerAddrsFromPB(resp.GetAlternatives())
			if len(PeerAddrsFromPB(resp.GetAlternatives())) > MaxAlternatives {
				t.Fatal("too many alternatives")
			}
		}
	})
}
