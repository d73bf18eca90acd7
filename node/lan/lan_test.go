package lan

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
)

// loopbackHost is a libp2p host that listens on 127.0.0.1 only.
func loopbackHost(t *testing.T) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// records is a slog handler that keeps every record as text.
type records struct {
	mu   sync.Mutex
	msgs []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.Key + "=" + a.Value.String()); return true })
	r.mu.Lock()
	r.msgs = append(r.msgs, b.String())
	r.mu.Unlock()
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

func (r *records) withPrefix(prefix string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.msgs {
		if strings.HasPrefix(s, prefix) {
			out = append(out, s)
		}
	}
	return out
}

// TestUsable: when a node runs mDNS, and the reason it gives when not.
func TestUsable(t *testing.T) {
	h := loopbackHost(t)
	tests := []struct {
		name string
		cfg  Config
		why  string
	}{
		{"off", Config{Host: h, On: false}, "--mdns=false"},
		{"bootstrap", Config{Host: h, On: true, Bootstrap: true}, "bootstrap"},
		{"loopback only", Config{Host: h, On: true}, "loopback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if use, why := Usable(tt.cfg); use || !strings.Contains(why, tt.why) {
				t.Fatalf("Usable = %v, %q; want false, %q", use, why, tt.why)
			}
		})
	}
}

// TestJoinHintSaysWhy: the hint names what mDNS found, or why it did not
// look, and gives an example --bootstrap.
func TestJoinHintSaysWhy(t *testing.T) {
	var r records
	cfg := Config{Host: loopbackHost(t), Now: time.Now, Log: slog.New(&r)}
	joinHint(cfg, true, "", 0)
	joinHint(cfg, true, "", 3)
	joinHint(cfg, false, "mDNS is off (--mdns=false)", 0)
	got := r.withPrefix(JoinHintPrefix)
	if len(got) != 3 {
		t.Fatalf("%d hints, want 3: %v", len(got), got)
	}
	for i, want := range []string{"mDNS found no overlayd peer", "found 3 overlayd peers", "--mdns=false"} {
		if !strings.Contains(got[i], want) || !strings.Contains(got[i], "--bootstrap /ip4/") {
			t.Errorf("hint %q: want %q and an example --bootstrap", got[i], want)
		}
	}
}

// TestRunHintsOnceAlone: a node alone, with no bootstrap peers, gives the
// hint once; one with bootstrap peers gives none, and Run returns at once.
func TestRunHintsOnceAlone(t *testing.T) {
	var r records
	cfg := Config{Host: loopbackHost(t), On: true, HintAfter: time.Millisecond, Now: time.Now, Log: slog.New(&r)}
	// Alone and not using mDNS (loopback only): Run returns after the hint.
	Run(context.Background(), cfg)
	if got := r.withPrefix(JoinHintPrefix); len(got) != 1 || !strings.Contains(got[0], "loopback") {
		t.Fatalf("hints %v, want one naming the loopback addresses", got)
	}
	cfg.Bootstrap = true
	Run(context.Background(), cfg)
	if got := r.withPrefix(JoinHintPrefix); len(got) != 1 {
		t.Fatalf("hints %v after a run with bootstrap peers, want still one", got)
	}
}
