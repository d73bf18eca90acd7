package node

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/node/lan"
)

// TestMDNSJoinHint: a node alone, with no bootstrap peers, says once how to
// join a network, and why it found no one.
func TestMDNSJoinHint(t *testing.T) {
	tests := []struct {
		name string
		mdns bool
		why  string
	}{
		{"mdns unused on loopback", true, "loopback"},
		{"mdns off", false, "--mdns=false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m messages
			c := testConfig(t, config.RoleSupernode)
			c.MDNS = tt.mdns
			n, err := New(c, WithLogger(slog.New(&m)))
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Start(context.Background()); err != nil {
				n.Close()
				t.Fatal(err)
			}
			t.Cleanup(func() { n.Close() })
			waitFor(t, 10*c.AnnounceInterval, "join hint", func() bool { return m.has(lan.JoinHintPrefix) })
			hint := m.find(lan.JoinHintPrefix)
			if !strings.Contains(hint, "--bootstrap /ip4/") || !strings.Contains(hint, tt.why) {
				t.Fatalf("hint %q: want an example --bootstrap and %q", hint, tt.why)
			}
			// Once, over the node's whole life: Close waits for the loop.
			n.Close()
			if k := m.count(lan.JoinHintPrefix); k != 1 {
				t.Fatalf("hint logged %d times", k)
			}
		})
	}
}

// messages is a slog handler that keeps every record as text.
type messages struct {
	mu   sync.Mutex
	msgs []string
}

func (m *messages) Enabled(context.Context, slog.Level) bool { return true }
func (m *messages) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.Key + "=" + a.Value.String()); return true })
	m.mu.Lock()
	m.msgs = append(m.msgs, b.String())
	m.mu.Unlock()
	return nil
}
func (m *messages) WithAttrs([]slog.Attr) slog.Handler { return m }
func (m *messages) WithGroup(string) slog.Handler      { return m }

func (m *messages) find(prefix string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.msgs {
		if strings.HasPrefix(s, prefix) {
			return s
		}
	}
	return ""
}

func (m *messages) has(prefix string) bool { return m.find(prefix) != "" }

func (m *messages) count(prefix string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := 0
	for _, s := range m.msgs {
		if strings.HasPrefix(s, prefix) {
			k++
		}
	}
	return k
}
