package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

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

// FuzzFrameReader feeds arbitrary bytes to the frame reader as every
// message type the stream protocols decode: no panic, limits hold.
func FuzzFrameReader(f *testing.F) {
	add := func(m proto.Message) {
		b, err := AppendFrame(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	add(&pb.AttachResponse{Status: pb.AttachResponse_STATUS_BUSY, RetryAfterMs: 1000,
		Alternatives: []*pb.PeerAddrs{{PeerId: []byte("x"), Addrs: [][]byte{{4, 127, 0, 0, 1}}}}})
	add(&pb.SessionFrame{Kind: &pb.SessionFrame_Ping{Ping: &pb.Ping{Seq: 9}}})
	add(&pb.SessionFrame{Kind: &pb.SessionFrame_Send{Send: &pb.DirectMessage{Id: make([]byte, 16), To: []byte("t"), Payload: []byte("hi")}}})
	add(&pb.RelayFrame{Kind: &pb.RelayFrame_Presence{Presence: &pb.PresenceBatch{Records: []*pb.PresenceRecord{{Client: []byte("c"), SessionSeq: 3, Attached: true}}}}})
	add(&pb.RelayFrame{Kind: &pb.RelayFrame_GroupMessage{GroupMessage: &pb.GroupMessage{Group: "g", Seq: 1, Payload: []byte("p")}}})
	add(&pb.LookupResponse{Found: true, Location: []byte("l")})
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, tc := range []struct {
			max int
			m   func() proto.Message
		}{
			{MaxAttachFrame, func() proto.Message { return &pb.AttachRequest{} }},
			{MaxAttachFrame, func() proto.Message { return &pb.AttachResponse{} }},
			{MaxSessionFrame, func() proto.Message { return &pb.SessionFrame{} }},
			{MaxRelayFrame, func() proto.Message { return &pb.RelayFrame{} }},
			{MaxLookupFrame, func() proto.Message { return &pb.LookupRequest{} }},
			{MaxLookupFrame, func() proto.Message { return &pb.LookupResponse{} }},
		} {
			r := NewFrameReader(bytes.NewReader(data), tc.max)
			for range 4 {
				m := tc.m()
				if err := r.Read(m); err != nil {
					break
				}
				if proto.Size(m) > tc.max {
					t.Fatalf("decoded %d bytes past the %d limit", proto.Size(m), tc.max)
				}
				if resp, ok := m.(*pb.AttachResponse); ok && len(PeerAddrsFromPB(resp.GetAlternatives())) > MaxAlternatives {
					t.Fatal("too many alternatives")
				}
			}
		}
	})
}
