package localapi

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
)

// FuzzDecodeStream feeds the listen stream decoder arbitrary bytes: it must
// not panic, must pass on only valid JSON values, and what Listen decodes
// from them into Inbound must encode again.
func FuzzDecodeStream(f *testing.F) {
	for _, s := range []string{
		"",
		`{"kind":"direct","from":"12D3KooWa","id":"0a","payload":"aGk=","text":"hi","time":"2026-03-01T12:00:00Z"}` + "\n",
		`{"kind":"gap","dropped":5,"time":"2026-03-01T12:00:00Z"}` + "\n" + `{"kind":"group","group":"g","seq":1}`,
		`{"kind":"direct","payload":"!!"}`,
		`{"kind":`,
		"[1,2]\n\"x\"\nnull",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = decodeStream(context.Background(), bytes.NewReader(data), func(m json.RawMessage) error {
			if !json.Valid(m) {
				t.Fatalf("passed on invalid JSON %q", m)
			}
			var in Inbound
			if json.Unmarshal(m, &in) == nil {
				_, _ = json.Marshal(in) // a year past 9999 fails; it must not panic
			}
			return nil
		})
	})
}
