package node

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// collect is a slog handler that keeps the first attach failures and
// session ends, for a failing test to print.
type collect struct {
	mu   sync.Mutex
	msgs []string
}

func (c *collect) Enabled(context.Context, slog.Level) bool { return true }
func (c *collect) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "attach failed" && r.Message != "session ended" && r.Message != "moved back to home cluster" {
		return nil
	}
	s := r.Message
	r.Attrs(func(a slog.Attr) bool { s += fmt.Sprintf(" %s=%v", a.Key, a.Value); return true })
	c.mu.Lock()
	if len(c.msgs) < 20 {
		c.msgs = append(c.msgs, s)
	}
	c.mu.Unlock()
	return nil
}
func (c *collect) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *collect) WithGroup(string) slog.Handler      { return c }
