package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/node/role"
	"github.com/overlayd/overlayd/node/tunnel"
	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/protocol"
)

type fakeOperator struct{ promoteErr error }

func (f fakeOperator) Promote(context.Context, []byte) (protocol.MegaCert, error) {
	return protocol.MegaCert{}, f.promoteErr
}
func (fakeOperator) Demote(context.Context, string) error { return errors.New("not a mega") }
func (fakeOperator) Revoke(context.Context, []byte) (protocol.Revocation, error) {
	return protocol.Revocation{Serial: 7}, nil
}

type fakePinger struct{}

func (fakePinger) Ping(_ context.Context, p peer.ID, count int, _ time.Duration) (localapi.PingResponse, error) {
	if count < 0 {
		return localapi.PingResponse{}, fmt.Errorf("ping: %w", client.ErrNotLocated)
	}
	return localapi.PingResponse{Peer: p.String(), Path: "direct"}, nil
}

// testServer serves Handler over a node without a client side (a pinned
// supernode) whose operator answers promoteErr.
func testServer(t *testing.T, promoteErr error) *httptest.Server {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	m, err := tunnel.New(h, tunnel.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m.Start()
	t.Cleanup(m.Close)
	handler, err := Handler(Config{
		Status:     func() localapi.Status { return localapi.Status{PeerID: h.ID().String()} },
		Peers:      func() []localapi.Peer { return []localapi.Peer{} },
		Supernodes: func() []localapi.Supernode { return []localapi.Supernode{} },
		Ring:       func() localapi.Ring { return localapi.Ring{} },
		Tunnels:    m,
		Pinger:     fakePinger{},
		Operator:   fakeOperator{promoteErr: promoteErr},
		Lifetime:   t.Context(),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv
}

// TestRoutes: each route answers with the status its inputs call for.
func TestRoutes(t *testing.T) {
	id := "12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"
	tests := []struct {
		name, method, path, body string
		promoteErr               error
		want                     int
		contains                 string
	}{
		{"status", "GET", "/v1/status", "", nil, 200, "peer_id"},
		{"peers", "GET", "/v1/peers", "", nil, 200, "[]"},
		{"supernodes", "GET", "/v1/supernodes", "", nil, 200, "[]"},
		{"ring", "GET", "/v1/ring", "", nil, 200, "{"},
		{"send without a client side", "POST", "/v1/send", `{"to":"` + id + `"}`, nil, 409, "relays them"},
		{"groups without a client side", "GET", "/v1/groups", "", nil, 409, ""},
		{"ping", "POST", "/v1/ping", `{"peer":"` + id + `","count":1}`, nil, 200, "direct"},
		{"ping not located", "POST", "/v1/ping", `{"peer":"` + id + `","count":-1}`, nil, 404, ""},
		{"ping bad peer", "POST", "/v1/ping", `{"peer":"nope"}`, nil, 400, "not a peer ID"},
		{"ping bad body", "POST", "/v1/ping", `{`, nil, 400, "request body"},
		{"promote bad blob", "POST", "/v1/promote", `{"blob":"%%"}`, nil, 400, ""},
		{"demote", "POST", "/v1/demote", `{}`, nil, 409, "not a mega"},
		{"revoke bad blob", "POST", "/v1/revoke", `{"blob":"%%"}`, nil, 400, ""},
		{"tunnels", "GET", "/v1/tunnels", "", nil, 200, "{"},
		{"unexpose unknown", "POST", "/v1/tunnels/unexpose", `{"name":"x"}`, nil, 404, ""},
		{"expose bad allow", "POST", "/v1/tunnels/expose", `{"name":"x","target":"127.0.0.1:1","allow":["nope"]}`, nil, 400, "not a peer ID"},
		{"connect bad peer", "POST", "/v1/tunnels/connect", `{"peer":"nope","service":"x"}`, nil, 400, ""},
		{"disconnect unknown", "POST", "/v1/tunnels/disconnect", `{"listen":"127.0.0.1:1"}`, nil, 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := testServer(t, tt.promoteErr)
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.want || !strings.Contains(string(b), tt.contains) {
				t.Fatalf("%s %s: %d %s, want %d containing %q", tt.method, tt.path, resp.StatusCode, b, tt.want, tt.contains)
			}
		})
	}
}

// TestHTTPStatus: the client side's errors, wrapped, map to the statuses
// the CLI explains.
func TestHTTPStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{client.ErrInvalid, 400}, {client.ErrOffline, 404}, {client.ErrNotLocated, 404},
		{client.ErrUnreachable, 502}, {client.ErrOverQuota, 507}, {client.ErrBusy, 503},
		{client.ErrNotAttached, 503}, {client.ErrNoAck, 504}, {errors.New("other"), 500},
	} {
		if got := httpStatus(fmt.Errorf("x: %w", tc.err)); got != tc.want {
			t.Errorf("httpStatus(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	for _, tc := range []struct {
		err  error
		want int
	}{
		{tunnel.ErrInvalid, 400}, {tunnel.ErrNotFound, 404}, {tunnel.ErrExists, 409}, {tunnel.ErrLimit, 409},
		{tunnel.ErrClosed, 409}, {client.ErrInvalid, 400}, {errors.New("other"), 500},
	} {
		if got := tunnelStatus(fmt.Errorf("x: %w", tc.err)); got != tc.want {
			t.Errorf("tunnelStatus(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{"hello\n\tworld": "hello\n\tworld", "a\x00b": "", "\xff": "", "": ""} {
		if got := printable([]byte(in)); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
	if got := inboundJSON(client.Inbound{Payload: []byte("hi"), ID: []byte{1}}); got.Text != "hi" || got.ID != "01" {
		t.Errorf("inboundJSON: %+v", got)
	}
}

func TestHandlerNeedsConfig(t *testing.T) {
	if _, err := Handler(Config{}); err == nil {
		t.Fatal("Handler accepted an empty Config")
	}
}

// TestStatusFromState: the status shows the state it is given, a mega
// certificate overriding the role.
func TestStatusFromState(t *testing.T) {
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	now := time.Now()
	snap := &directory.Snapshot{}
	st := State{
		Host: h, Role: "ordinary", ConfiguredRole: "auto", RoleReason: "why", Capacity: 5,
		RoleCriteria:  []role.Criterion{{Name: "c", Held: true}},
		RoleChangedAt: now, Started: now.Add(-time.Minute), Now: now, Directory: snap, RingVersion: "v1",
		Registry: prometheus.NewRegistry(), Version: "devel",
	}
	s := Status(st)
	if s.PeerID != h.ID().String() || s.Role != "ordinary" || s.ConfiguredRole != "auto" || s.UptimeSeconds != 60 ||
		len(s.RoleCriteria) != 1 || s.RoleChangedAt == nil || len(s.Addrs) != 1 || s.RingVersion != "v1" || s.Version != "devel" {
		t.Fatalf("status %+v", s)
	}
	st.Mega = &protocol.MegaCert{Serial: 3, Capacity: 1000, NotAfter: now}
	if s := Status(st); s.Role != "mega" || s.Capacity != 1000 || s.Mega == nil {
		t.Fatalf("mega status %+v", s)
	}
	if ps := Peers(h, snap, nil); len(ps) != 0 {
		t.Fatalf("peers %+v", ps)
	}
	if ss := Supernodes(snap, h.ID()); len(ss) != 0 {
		t.Fatalf("supernodes %+v", ss)
	}
	if r := Ring(nil); r.Stats.Members != 0 {
		t.Fatalf("ring %+v", r)
	}
}

// TestRefusals: only the non-zero refusal counters are listed, with their
// labels.
func TestRefusals(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "overlayd_x_refused_total", Help: "h"}, []string{"reason"})
	reg.MustRegister(c)
	c.WithLabelValues("busy").Add(2)
	c.WithLabelValues("idle")
	got := refusals(reg)
	if len(got) != 1 || got[0].Metric != "x_refused_total" || got[0].Labels != "reason=busy" || got[0].Count != 2 {
		t.Fatalf("refusals %+v", got)
	}
}
