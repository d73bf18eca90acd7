package localapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/overlay/ring"
)

// routes are the daemon's routes, as node registers them.
var routes = []string{
	"GET /v1/status",
	"GET /v1/peers",
	"GET /v1/supernodes",
	"GET /v1/ring",
	"POST /v1/send",
	"GET /v1/groups",
	"POST /v1/groups/{group}/join",
	"POST /v1/groups/{group}/leave",
	"POST /v1/groups/{group}/publish",
	"GET /v1/groups/{group}/members",
	"GET /v1/listen",
	"POST /v1/ping",
	"POST /v1/promote",
	"POST /v1/demote",
	"POST /v1/revoke",
	"GET /v1/tunnels",
	"POST /v1/tunnels/expose",
	"POST /v1/tunnels/unexpose",
	"POST /v1/tunnels/connect",
	"POST /v1/tunnels/disconnect",
}

// request is what the fake daemon saw of one request.
type request struct {
	Pattern     string // the route it matched
	Path        string // the path as sent, escaped
	Group       string // {group}, unescaped
	Body        string
	ContentType string
}

// fakeDaemon records the requests startFake's server saw.
type fakeDaemon struct {
	addr string // the server's TCP address
	mu   sync.Mutex
	seen []request
}

func (d *fakeDaemon) requests() []request {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]request(nil), d.seen...)
}

// startFake starts a fake daemon on loopback TCP with a token, as
// --api-listen does, and returns a client of its data dir. It serves the
// daemon's routes with the package's own server helpers: each answers
// answers[pattern] (an *localapi.Error is written as the daemon writes
// errors; a pattern without answer is not registered) and records the
// request. /v1/listen is served by listen when not nil.
func startFake(t testing.TB, answers map[string]any, listen http.HandlerFunc) (*localapi.Client, *fakeDaemon) {
	t.Helper()
	d := &fakeDaemon{}
	mux := http.NewServeMux()
	for _, pattern := range routes {
		answer, ok := answers[pattern]
		if pattern == "GET /v1/listen" && listen != nil {
			mux.HandleFunc(pattern, listen)
			continue
		}
		if !ok {
			continue
		}
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			d.mu.Lock()
			d.seen = append(d.seen, request{Pattern: pattern, Path: r.URL.EscapedPath(), Group: r.PathValue("group"),
				Body: string(body), ContentType: r.Header.Get("Content-Type")})
			d.mu.Unlock()
			if e, ok := answer.(*localapi.Error); ok {
				localapi.WriteError(w, e.Status, errors.New(e.Message))
				return
			}
			localapi.WriteJSON(w, answer)
		})
	}
	const token = "secret-token"
	srv := httptest.NewServer(localapi.RequireToken(token, mux))
	t.Cleanup(srv.Close)
	d.addr = srv.Listener.Addr().String()
	dir := t.TempDir()
	for name, v := range map[string]string{localapi.AddrFile: d.addr, localapi.TokenFile: token} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return localapi.NewClient(dir), d
}

func TestClientRoutes(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	status := localapi.Status{PeerID: "12D3KooWself", Role: "mega", ConfiguredRole: "supernode", Capacity: 900,
		Addrs: []string{"/ip4/127.0.0.1/tcp/4001"}, StartedAt: t0, Version: "v1",
		Mega: &localapi.MegaCert{Serial: 7, Capacity: 900, NotBefore: t0, NotAfter: t0.Add(time.Hour)}}
	const peerID = "12D3KooWpeer"
	tests := []struct {
		name     string
		call     func(context.Context, *localapi.Client) (any, error)
		pattern  string
		path     string
		body     string // JSON the client sent; "" for none
		answer   any    // what the fake daemon writes
		want     any    // what the call returns
		wantNone bool   // the call returns only an error
	}{
		{name: "status", pattern: "GET /v1/status", path: "/v1/status", answer: status, want: status,
			call: func(ctx context.Context, c *localapi.Client) (any, error) { return c.Status(ctx) }},
		{name: "peers", pattern: "GET /v1/peers", path: "/v1/peers",
			answer: []localapi.Peer{{ID: peerID, Addrs: []string{"/ip4/10.0.0.1/tcp/1"}, Direction: "inbound", Attached: true, AttachedSince: &t0}},
			want:   []localapi.Peer{{ID: peerID, Addrs: []string{"/ip4/10.0.0.1/tcp/1"}, Direction: "inbound", Attached: true, AttachedSince: &t0}},
			call:   func(ctx context.Context, c *localapi.Client) (any, error) { return c.Peers(ctx) }},
		{name: "supernodes", pattern: "GET /v1/supernodes", path: "/v1/supernodes",
			answer: []localapi.Supernode{{ID: "s1", Role: "supernode", Capacity: 100, Load: 120, Spare: -20, LastSeen: t0, Expires: t0}},
			want:   []localapi.Supernode{{ID: "s1", Role: "supernode", Capacity: 100, Load: 120, Spare: -20, LastSeen: t0, Expires: t0}},
			call:   func(ctx context.Context, c *localapi.Client) (any, error) { return c.Supernodes(ctx) }},
		{name: "ring", pattern: "GET /v1/ring", path: "/v1/ring",
			answer: localapi.Ring{Stats: ring.Stats{Version: "abc", Members: 3, Points: 300}},
			want:   localapi.Ring{Stats: ring.Stats{Version: "abc", Members: 3, Points: 300}},
			call:   func(ctx context.Context, c *localapi.Client) (any, error) { return c.Ring(ctx) }},
		{name: "send", pattern: "POST /v1/send", path: "/v1/send", body: `{"to":"12D3KooWpeer","payload":"aGkgdGhlcmU="}`,
			answer: localapi.SendResponse{ID: "0a0b", Status: "delivered"}, want: localapi.SendResponse{ID: "0a0b", Status: "delivered"},
			call: func(ctx context.Context, c *localapi.Client) (any, error) {
				return c.Send(ctx, peerID, []byte("hi there"))
			}},
		{name: "groups", pattern: "GET /v1/groups", path: "/v1/groups",
			answer: []string{"a", "b/c"}, want: []string{"a", "b/c"},
			call: func(ctx context.Context, c *localapi.Client) (any, error) { return c.Groups(ctx) }},
		{name: "join", pattern: "POST /v1/groups/{group}/join", path: "/v1/groups/chat/join", body: `{}`,
			answer: struct{}{}, wantNone: true,
			call: func(ctx context.Context, c *localapi.Client) (any, error) { return nil, c.Join(ctx, "chat") }},
		{name: "leave", pattern: "POST /v1/groups/{group}/leave", path: "/v1/groups/chat/leave", body: `{}`,
			answer: struct{}{}, wantNone: true,
			call: func(ctx context.Context, c *localapi.Client) (any, error) { return nil, c.Leave(ctx, "chat") }},
		{name: "publish", pattern: "POST /v1/groups/{group}/publish", path: "/v1/groups/chat/publish", body: `{"payload":"AAH/"}`,
			answer: localapi.PublishResponse{ID: "01", Group: "chat", Epoch: 2, Seq: 9},
			want:   localapi.PublishResponse{ID: "01", Group: "chat", Epoch: 2, Seq: 9},
			call: func(ctx context.Context, c *localapi.Client) (any, error) {
				return c.Publish(ctx, "chat", []byte{0, 1, 0xff})
			}},
		{name: "members", pattern: "GET /v1/groups/{group}/members", path: "/v1/groups/chat/members",
			answer: localapi.GroupMembers{Group: "chat", Members: []string{"p1", "p2"}},
			want:   localapi.GroupMembers{Group: "chat", Members: []string{"p1", "p2"}},
			call:   func(ctx context.Context, c *localapi.Client) (any, error) { return c.Members(ctx, "chat") }},
		{name: "ping", pattern: "POST /v1/ping", path: "/v1/ping", body: `{"peer":"12D3KooWpeer","count":3,"wait_ms":1500}`,
			answer: localapi.PingResponse{Peer: peerID, Path: "relayed", Relay: "s1", RTTMs: []float64{1.5, 2}, BecameDirect: true, DirectRTTMs: []float64{0.5}},
			want:   localapi.PingResponse{Peer: peerID, Path: "relayed", Relay: "s1", RTTMs: []float64{1.5, 2}, BecameDirect: true, DirectRTTMs: []float64{0.5}},
			call: func(ctx context.Context, c *localapi.Client) (any, error) {
				return c.Ping(ctx, localapi.PingRequest{Peer: peerID, Count: 3, WaitMs: 1500})
			}},
		{name: "tunnels", pattern: "GET /v1/tunnels", path: "/v1/tunnels",
			answer: localapi.Tunnels{Window: 1 << 20, Exposed: []localapi.ExposedService{{Name: "web", Target: "127.0.0.1:8080", AllowAny: true}}},
			want:   localapi.Tunnels{Window: 1 << 20, Exposed: []localapi.ExposedService{{Name: "web", Target: "127.0.0.1:8080", AllowAny: true}}},
			call:   func(ctx context.Context, c *localapi.Client) (any, error) { return c.Tunnels(ctx) }},
		{name: "expose", pattern: "POST /v1/tunnels/expose", path: "/v1/tunnels/expose", body: `{"name":"web","target":"127.0.0.1:8080","allow":["p1"]}`,
			answer: localapi.ExposedService{Name: "web", Target: "127.0.0.1:8080", Allow: []string{"p1"}},
			want:   localapi.ExposedService{Name: "web", Target: "127.0.0.1:8080", Allow: []string{"p1"}},
			call: func(ctx context.Context, c *localapi.Client) (any, error) {
				return c.Expose(ctx, localapi.ExposeRequest{Name: "web", Target: "127.0.0.1:8080", Allow: []string{"p1"}})
			}},
		{name: "unexpose", pattern: "POST /v1/tunnels/unexpose", path: "/v1/tunnels/unexpose", body: `{"name":"web"}`,
			answer: struct{}{}, wantNone: true,
			call: func(ctx context.Context, c *localapi.Client) (any, error) { return nil, c.Unexpose(ctx, "web") }},
		{name: "connect", pattern: "POST /v1/tunnels/connect", path: "/v1/tunnels/connect", body: `{"peer":"p1","service":"web","listen":"127.0.0.1:0"}`,
			answer: localapi.TunnelConnect{Listen: "127.0.0.1:9090", Peer: "p1", Service: "web"},
			want:   localapi.TunnelConnect{Listen: "127.0.0.1:9090", Peer: "p1", Service: "web"},
			call: func(ctx context.Context, c *localapi.Client) (any, error) {
				return c.Connect(ctx, localapi.ConnectRequest{Peer: "p1", Service: "web", Listen: "127.0.0.1:0"})
			}},
		{name: "disconnect", pattern: "POST /v1/tunnels/disconnect", path: "/v1/tunnels/disconnect", body: `{"listen":"127.0.0.1:9090"}`,
			answer: struct{}{}, wantNone: true,
			call: func(ctx context.Context, c *localapi.Client) (any, error) {
				return nil, c.Disconnect(ctx, "127.0.0.1:9090")
			}},
		{name: "promote", pattern: "POST /v1/promote", path: "/v1/promote", body: `{"blob":"CERT"}`,
			answer: status, want: status,
			call: func(ctx context.Context, c *localapi.Client) (any, error) { return c.Promote(ctx, "CERT") }},
		{name: "demote", pattern: "POST /v1/demote", path: "/v1/demote", body: `{}`,
			answer: localapi.Status{PeerID: "12D3KooWself", Role: "supernode", Capacity: 100, StartedAt: t0},
			want:   localapi.Status{PeerID: "12D3KooWself", Role: "supernode", Capacity: 100, StartedAt: t0},
			call:   func(ctx context.Context, c *localapi.Client) (any, error) { return c.Demote(ctx) }},
		// The daemon writes a map; RevokeResponse decodes it.
		{name: "revoke", pattern: "POST /v1/revoke", path: "/v1/revoke", body: `{"blob":"REV"}`,
			answer: map[string]uint64{"serial": 42}, want: localapi.RevokeResponse{Serial: 42},
			call: func(ctx context.Context, c *localapi.Client) (any, error) { return c.Revoke(ctx, "REV") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, d := startFake(t, map[string]any{tt.pattern: tt.answer}, nil)
			got, err := tt.call(t.Context(), c)
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			if !tt.wantNone && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v\nwant %#v", got, tt.want)
			}
			seen := d.requests()
			if len(seen) != 1 {
				t.Fatalf("daemon saw %d requests, want 1: %+v", len(seen), seen)
			}
			r := seen[0]
			if r.Pattern != tt.pattern || r.Path != tt.path {
				t.Errorf("request matched %q at %q, want %q at %q", r.Pattern, r.Path, tt.pattern, tt.path)
			}
			if r.Body != tt.body {
				t.Errorf("body %q, want %q", r.Body, tt.body)
			}
			wantCT := ""
			if tt.body != "" {
				wantCT = "application/json"
			}
			if r.ContentType != wantCT {
				t.Errorf("Content-Type %q, want %q", r.ContentType, wantCT)
			}
		})
	}
}

func TestClientGroupEscaping(t *testing.T) {
	tests := []struct {
		name, group, path string
	}{
		{name: "slash", group: "a/b", path: "/v1/groups/a%2Fb/members"},
		{name: "space", group: "team chat", path: "/v1/groups/team%20chat/members"},
		{name: "percent", group: "100%", path: "/v1/groups/100%25/members"},
		{name: "query and fragment", group: "a?b#c", path: "/v1/groups/a%3Fb%23c/members"},
		{name: "unicode", group: "grüße", path: "/v1/groups/gr%C3%BC%C3%9Fe/members"},
		{name: "dots inside", group: "...x", path: "/v1/groups/...x/members"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, d := startFake(t, map[string]any{"GET /v1/groups/{group}/members": localapi.GroupMembers{Group: tt.group}}, nil)
			if _, err := c.Members(t.Context(), tt.group); err != nil {
				t.Fatalf("members: %v", err)
			}
			seen := d.requests()
			if len(seen) != 1 {
				t.Fatalf("daemon saw %d requests: %+v", len(seen), seen)
			}
			if seen[0].Path != tt.path || seen[0].Group != tt.group {
				t.Errorf("sent %q, daemon read group %q; want %q and %q", seen[0].Path, seen[0].Group, tt.path, tt.group)
			}
		})
	}
	// Names that cannot be one path segment are refused before sending.
	for _, g := range []string{"", ".", ".."} {
		c, d := startFake(t, map[string]any{"POST /v1/groups/{group}/join": struct{}{}}, nil)
		// Sent, they would reach another route or none (the server cleans
		// the path): the client says why instead.
		err := c.Join(t.Context(), g)
		var e *localapi.Error
		if err == nil || errors.As(err, &e) || !strings.Contains(err.Error(), "cannot be sent") {
			t.Errorf("join %q: %v, want a refusal by the client", g, err)
		}
		if n := len(d.requests()); n != 0 {
			t.Errorf("join %q: daemon saw %d requests, want 0", g, n)
		}
	}
}

func TestClientErrors(t *testing.T) {
	const msg = "message 0a0b not delivered: recipient offline"
	tests := []struct {
		name    string
		answers map[string]any
		call    func(context.Context, *localapi.Client) error
		status  int
		message string
	}{
		{name: "daemon error", answers: map[string]any{"POST /v1/send": &localapi.Error{Status: 404, Message: msg}},
			call: func(ctx context.Context, c *localapi.Client) error {
				_, err := c.Send(ctx, "p", []byte("x"))
				return err
			},
			status: 404, message: msg},
		{name: "conflict on a POST without answer", answers: map[string]any{"POST /v1/groups/{group}/join": &localapi.Error{Status: 503, Message: "not attached"}},
			call:   func(ctx context.Context, c *localapi.Client) error { return c.Join(ctx, "g") },
			status: 503, message: "not attached"},
		{name: "listen refused", answers: map[string]any{"GET /v1/listen": &localapi.Error{Status: 409, Message: "listen: only ordinary nodes receive messages"}},
			call: func(ctx context.Context, c *localapi.Client) error {
				return c.Listen(ctx, nil, func(localapi.Inbound) error { return nil })
			},
			status: 409, message: "listen: only ordinary nodes receive messages"},
		{name: "route unknown to an older daemon", answers: map[string]any{},
			call: func(ctx context.Context, c *localapi.Client) error {
				_, err := c.Ping(ctx, localapi.PingRequest{Peer: "p"})
				return err
			},
			status: 404, message: "404 Not Found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := startFake(t, tt.answers, nil)
			err := tt.call(t.Context(), c)
			var e *localapi.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T), want a *localapi.Error", err, err)
			}
			if e.Status != tt.status || e.Message != tt.message {
				t.Errorf("got status %d message %q, want %d %q", e.Status, e.Message, tt.status, tt.message)
			}
			if err.Error() != "daemon: "+tt.message {
				t.Errorf("error text %q", err.Error())
			}
		})
	}
}

func TestClientWrongToken(t *testing.T) {
	c, d := startFake(t, map[string]any{"GET /v1/status": localapi.Status{}}, nil)
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatalf("status with the token: %v", err)
	}
	// A client whose token file is stale is refused with the daemon's word.
	dir := t.TempDir()
	for name, v := range map[string]string{localapi.AddrFile: d.addr, localapi.TokenFile: "stale"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, err := localapi.NewClient(dir).Status(t.Context())
	var e *localapi.Error
	if !errors.As(err, &e) || e.Status != http.StatusUnauthorized || e.Message != "missing or wrong API token" {
		t.Fatalf("stale token: %v", err)
	}
}

func TestClientNoDaemon(t *testing.T) {
	dir, err := os.MkdirTemp("", "ovl-api-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	_, err = localapi.NewClient(dir).Status(t.Context())
	if !errors.Is(err, localapi.ErrNoDaemon) {
		t.Fatalf("status without daemon: %v, want ErrNoDaemon", err)
	}
}

// TestClientUnixSocket reaches a daemon on the data dir's socket, the
// default, with no token.
func TestClientUnixSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "ovl-api-") // short: a socket path has ~100 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, token, err := localapi.Listen(t.Context(), dir, "")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/groups", func(w http.ResponseWriter, _ *http.Request) { localapi.WriteJSON(w, []string{"g"}) })
	srv := &http.Server{Handler: localapi.RequireToken(token, mux)}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	gs, err := localapi.NewClient(dir).Groups(t.Context())
	if err != nil || !reflect.DeepEqual(gs, []string{"g"}) {
		t.Fatalf("groups over the socket: %q, %v", gs, err)
	}
}

// listenLines serves /v1/listen as the daemon does: headers first, then
// each line, flushed; then it holds the stream open until the client goes,
// or ends it when closeAfter.
func listenLines(lines []string, closeAfter bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for _, l := range lines {
			fmt.Fprintln(w, l)
			w.(http.Flusher).Flush()
		}
		if closeAfter {
			return
		}
		<-r.Context().Done()
	}
}

var (
	t1     = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	stream = []string{
		`{"kind":"direct","from":"12D3KooWa","id":"0a0b","payload":"aGk=","text":"hi","time":"2026-03-01T12:00:00.123456789Z"}`,
		`{"kind":"group","from":"12D3KooWb","group":"team chat","epoch":2,"seq":17,"id":"0c","payload":"AAH/","time":"2026-03-01T12:00:00.123456789Z"}`,
		`{"kind":"gap","dropped":5,"time":"2026-03-01T12:00:00.123456789Z"}`,
	}
	streamWant = []localapi.Inbound{
		{Kind: "direct", From: "12D3KooWa", ID: "0a0b", Payload: []byte("hi"), Text: "hi", Time: t1},
		{Kind: "group", From: "12D3KooWb", Group: "team chat", Epoch: 2, Seq: 17, ID: "0c", Payload: []byte{0, 1, 0xff}, Time: t1},
		{Kind: "gap", Dropped: 5, Time: t1},
	}
)

func TestListen(t *testing.T) {
	errStop := errors.New("stop")
	tests := []struct {
		name       string
		closeAfter bool
		stopAt     int // each returns errStop on this message (1-based); 0: never
		want       int
		wantErr    error
	}{
		{name: "each stops", stopAt: 2, want: 2, wantErr: errStop},
		{name: "daemon ends the stream", closeAfter: true, want: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := startFake(t, nil, listenLines(stream, tt.closeAfter))
			var got []localapi.Inbound
			readyAt := -1
			err := c.Listen(t.Context(), func() { readyAt = len(got) }, func(in localapi.Inbound) error {
				got = append(got, in)
				if len(got) == tt.stopAt {
					return errStop
				}
				return nil
			})
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("listen returned %v, want %v", err, tt.wantErr)
			}
			if readyAt != 0 {
				t.Errorf("ready called after %d messages, want before the first", readyAt)
			}
			if !reflect.DeepEqual(got, streamWant[:tt.want]) {
				t.Errorf("got %+v\nwant %+v", got, streamWant[:tt.want])
			}
		})
	}
}

func TestListenContextEnds(t *testing.T) {
	c, _ := startFake(t, nil, listenLines(stream[:1], false))
	ctx, cancel := context.WithCancel(t.Context())
	got := 0
	err := c.Listen(ctx, nil, func(localapi.Inbound) error {
		got++
		cancel() // the stream stays open: only ctx ends Listen
		return nil
	})
	if err != nil || got != 1 {
		t.Fatalf("listen after cancel: %v, %d messages", err, got)
	}
}

// TestListenRaw passes the daemon's lines on byte for byte, unknown fields
// and all.
func TestListenRaw(t *testing.T) {
	lines := append([]string{`{"kind":"direct","text":"a","added_later":[1,2]}`}, stream...)
	c, _ := startFake(t, nil, listenLines(lines, true))
	var got []string
	if err := c.ListenRaw(t.Context(), nil, func(m json.RawMessage) error {
		got = append(got, string(m))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, lines) {
		t.Errorf("got %q\nwant %q", got, lines)
	}
}

func TestListenBadLine(t *testing.T) {
	c, _ := startFake(t, nil, listenLines([]string{`{"kind":"direct","seq":"x"}`}, true))
	err := c.Listen(t.Context(), nil, func(localapi.Inbound) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "decode") {
		t.Fatalf("bad line: %v", err)
	}
}

// TestInboundJSON pins the JSON of Inbound: the daemon streams exactly
// this shape on /v1/listen (node/api encodes Inbound), and listeners
// parse it.
func TestInboundJSON(t *testing.T) {
	tests := []struct {
		name string
		in   localapi.Inbound
		want string
	}{
		{name: "every field", in: localapi.Inbound{Kind: "group", From: "f", Group: "g", Epoch: 1, Seq: 2, ID: "ab",
			Payload: []byte("hi"), Text: "hi", Dropped: 3, Time: t1},
			want: `{"kind":"group","from":"f","group":"g","epoch":1,"seq":2,"id":"ab","payload":"aGk=","text":"hi","dropped":3,"time":"2026-03-01T12:00:00.123456789Z"}`},
		{name: "empty", in: localapi.Inbound{},
			want: `{"kind":"","time":"0001-01-01T00:00:00Z"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("got  %s\nwant %s", b, tt.want)
			}
		})
	}
}
