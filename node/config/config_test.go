package config

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/protocol"
)

// testConfig is a valid loopback-only config of role.
func testConfig(tb testing.TB, role Role) Config {
	tb.Helper()
	c := Default()
	c.DataDir = filepath.Join(tb.TempDir(), "data")
	c.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	c.Role = role
	c.Capacity = 50
	c.APIListen = APIOff
	return c
}

// operatorKey returns a fresh operator public key as --operator-pubkey
// takes it.
func operatorKey(tb testing.TB) string {
	tb.Helper()
	_, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := protocol.EncodeKey(pub)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func TestAutoConfigValidation(t *testing.T) {
	tests := []struct {
		name  string
		tweak func(*Config)
		field string // "" = valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"auto with defaults", func(c *Config) { c.Role = RoleAuto }, ""},
		{"high not above low", func(c *Config) { c.AutoSpareLow, c.AutoSpareHigh = 0.5, 0.5 }, "--auto-spare-high"},
		{"negative low", func(c *Config) { c.AutoSpareLow = -0.1 }, "--auto-spare-low"},
		{"delay max below min", func(c *Config) { c.AutoPromoteDelayMin, c.AutoPromoteDelayMax = time.Minute, time.Second }, "--auto-promote-delay-max"},
		{"negative delay min", func(c *Config) { c.AutoPromoteDelayMin = -time.Second }, "--auto-promote-delay-min"},
		{"negative uptime", func(c *Config) { c.AutoMinUptime = -time.Second }, "--auto-min-uptime"},
		{"zero min capacity", func(c *Config) { c.AutoMinCapacity = 0 }, "--auto-min-capacity"},
		{"negative demote-after", func(c *Config) { c.AutoDemoteAfter = -time.Second }, "--auto-demote-after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.DataDir = t.TempDir()
			tt.tweak(&c)
			err := c.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Field != tt.field {
				t.Fatalf("err = %v, want a *Error naming %s", err, tt.field)
			}
		})
	}
}

// TestAutoRolePolicyFromConfig: the flags, HomeHighLoad and cluster.Size
// reach the policy role.Decide is given.
func TestAutoRolePolicyFromConfig(t *testing.T) {
	c := Default()
	c.AutoSpareLow, c.AutoSpareHigh, c.AutoMinCapacity = 0.1, 0.9, 7
	p := c.RolePolicy()
	if p.SpareLow != 0.1 || p.SpareHigh != 0.9 || p.MinCapacity != 7 || p.ClusterSize != cluster.Size || p.HomeHighLoad != HomeHighLoad ||
		p.PromoteDelayMin != c.AutoPromoteDelayMin || p.PromoteDelayMax != c.AutoPromoteDelayMax || p.DemoteAfter != c.AutoDemoteAfter || p.MinUptime != c.AutoMinUptime {
		t.Fatalf("policy %+v from config", p)
	}
}

// TestRelayBudgetConfig: budgets that no circuit could fit are refused
// with a message naming the flag.
func TestRelayBudgetConfig(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string // "" for valid
	}{
		{Config{}, ""},
		{Config{RelayPeerBytes: -1, RelayPeerRate: -1}, ""},
		{Config{RelayPeerBytes: 256 << 10}, ""},
		{Config{RelayPeerBytes: 256<<10 - 1}, "--relay-peer-bytes"},
		{Config{RelayCircuitData: 1 << 20, RelayPeerBytes: 1 << 20}, "2 × --relay-circuit-data = 2097152"},
		{Config{RelayPeerBytes: -2}, "--relay-peer-bytes"},
		{Config{RelayPeerRate: 1023}, "--relay-peer-rate"},
		{Config{RelayPeerRate: -5}, "--relay-peer-rate"},
		{Config{RelayPeerRate: 1024}, ""},
	} {
		err := validateRelayBudgets(tc.c.RelaySettings())
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.c, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want an error naming %q", tc.c, err, tc.want)
		}
	}
	// Validate runs it.
	c := testConfig(t, RoleSupernode)
	c.RelayPeerBytes = 1000
	var ce *Error
	if err := c.Validate(); !errors.As(err, &ce) || ce.Field != "--relay-peer-bytes" {
		t.Fatalf("Validate: %v", err)
	}
}

func TestCertifiedModeConfig(t *testing.T) {
	op := struct{ pub string }{operatorKey(t)}
	tests := []struct {
		name      string
		tweak     func(c *Config)
		certified bool
		field     string // "" when valid
	}{
		{"no key: open", func(c *Config) {}, false, ""},
		{"a key: certified by default", func(c *Config) { c.OperatorPubkeys = []string{op.pub} }, true, ""},
		{"a key, open chosen: megas only", func(c *Config) { c.OperatorPubkeys, c.NetworkMode = []string{op.pub}, NetworkOpen }, false, ""},
		{"certified without a key", func(c *Config) { c.NetworkMode = NetworkCertified }, true, "--network-mode"},
		{"unknown mode", func(c *Config) { c.NetworkMode = "closed" }, false, "--network-mode"},
		{"supernode cert in an open network", func(c *Config) { c.SupernodeCert = "x.cert" }, false, "--supernode-cert"},
		{"supernode cert on an ordinary node", func(c *Config) {
			c.Role, c.OperatorPubkeys, c.SupernodeCert = RoleOrdinary, []string{op.pub}, "x.cert"
		}, true, "--supernode-cert"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig(t, RoleSupernode)
			tt.tweak(&c)
			if c.Certified() != tt.certified {
				t.Fatalf("Certified() = %v", c.Certified())
			}
			err := c.Validate()
			var ce *Error
			switch {
			case tt.field == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.field != "" && (!errors.As(err, &ce) || ce.Field != tt.field):
				t.Fatalf("Validate: %v, want an error naming %s", err, tt.field)
			}
		})
	}
}

func TestMDNSConfigDefault(t *testing.T) {
	c := Default()
	if !c.MDNS {
		t.Fatal("mDNS is off by default")
	}
	c.DataDir = t.TempDir()
	c.MDNS = false
	if err := c.Validate(); err != nil {
		t.Fatalf("mdns off: %v", err)
	}
}

// TestDerived: the values the node's parts are given follow the fields.
func TestDerived(t *testing.T) {
	c := testConfig(t, RoleOrdinary)
	if !c.PartialView() || c.ConnBudget() != c.ConnHeadroom {
		t.Fatalf("ordinary: partial view %v, budget %d", c.PartialView(), c.ConnBudget())
	}
	c.FullDirectory = true
	if c.PartialView() {
		t.Fatal("--full-directory keeps a partial view")
	}
	for _, r := range []Role{RoleSupernode, RoleAuto} {
		c := testConfig(t, r)
		if c.PartialView() || c.ConnBudget() != c.Capacity+c.ConnHeadroom {
			t.Fatalf("%s: partial view %v, budget %d", r, c.PartialView(), c.ConnBudget())
		}
	}
	if a, err := c.AnnounceMultiaddrs(); a != nil || err != nil {
		t.Fatalf("no announce addresses: %v, %v", a, err)
	}
	c.AnnounceAddrs = []string{"/ip4/192.0.2.1/tcp/4101"}
	if a, err := c.AnnounceMultiaddrs(); len(a) != 1 || err != nil {
		t.Fatalf("announce addresses: %v, %v", a, err)
	}
	if l, err := c.ListenAddrs(); len(l) != 1 || err != nil {
		t.Fatalf("listen addresses: %v, %v", l, err)
	}
}

// TestValidateNamesField: each bad value is refused with an *Error naming
// its flag.
func TestValidateNamesField(t *testing.T) {
	tests := []struct {
		field string
		tweak func(*Config)
	}{
		{"--data-dir", func(c *Config) { c.DataDir = "" }},
		{"--listen", func(c *Config) { c.Listen = nil }},
		{"--listen", func(c *Config) { c.Listen = []string{"nope"} }},
		{"--announce-addr", func(c *Config) { c.AnnounceAddrs = []string{"nope"} }},
		{"--bootstrap", func(c *Config) { c.Bootstrap = []string{"/ip4/127.0.0.1/tcp/1"} }},
		{"--role", func(c *Config) { c.Role = "king" }},
		{"--capacity", func(c *Config) { c.Capacity = -1 }},
		{"--capacity", func(c *Config) { c.Capacity = 2_000_000 }},
		{"--capacity", func(c *Config) { c.Role, c.Capacity = RoleSupernode, 0 }},
		{"--announce-interval", func(c *Config) { c.AnnounceInterval = time.Nanosecond }},
		{"--keepalive", func(c *Config) { c.Keepalive = 0 }},
		{"--offline-ttl", func(c *Config) { c.OfflineTTL = 0 }},
		{"--store-max-bytes", func(c *Config) { c.StoreMaxBytes = 1 }},
		{"--conn-headroom", func(c *Config) { c.ConnHeadroom = 1 }},
		{"--operator-pubkey", func(c *Config) { c.OperatorPubkeys = []string{"ed25519:nope"} }},
		{"--mega-cert", func(c *Config) { c.Role, c.MegaCert = RoleAuto, "m.cert" }},
		{"--mega-cert", func(c *Config) { c.Role, c.MegaCert = RoleSupernode, "m.cert" }},
		{"--tunnel-window", func(c *Config) { c.TunnelWindow = 1 }},
		{"--tunnel-max-conns", func(c *Config) { c.TunnelMaxConns = -1 }},
		{"--tunnel-idle-timeout", func(c *Config) { c.TunnelIdleTimeout = -1 }},
		{"--relay-circuit-data", func(c *Config) { c.RelayCircuitData = -1 }},
		{"--relay-circuit-duration", func(c *Config) { c.RelayCircuitDuration = -1 }},
		{"--conns-per-ip", func(c *Config) { c.ConnsPerIP = 0 }},
		{"--log-level", func(c *Config) { c.LogLevel = "loud" }},
		{"--log-format", func(c *Config) { c.LogFormat = "xml" }},
		{"--metrics-listen", func(c *Config) { c.MetricsListen = "0.0.0.0:9000" }},
		{"--metrics-listen", func(c *Config) { c.MetricsListen = "nope" }},
		{"--api-listen", func(c *Config) { c.APIListen = "192.0.2.1:80" }},
	}
	for _, tt := range tests {
		c := testConfig(t, RoleOrdinary)
		tt.tweak(&c)
		var ce *Error
		if err := c.Validate(); !errors.As(err, &ce) || ce.Field != tt.field || ce.Unwrap() == nil || !strings.Contains(ce.Error(), tt.field) {
			t.Errorf("%s: Validate = %v", tt.field, err)
		}
	}
	c := testConfig(t, RoleOrdinary)
	c.MetricsListen, c.MetricsPublic, c.APIListen = "0.0.0.0:9000", true, "localhost:1234"
	if err := c.Validate(); err != nil {
		t.Errorf("public metrics, API on localhost: %v", err)
	}
}

// TestLoadFileAndLogger: keys in the file replace the defaults, unknown
// keys are refused, and the logger follows the level and format.
func TestLoadFileAndLogger(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte("capacity: 7\nlog-format: json\nlog-level: debug\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("capacty: 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Default()
	if err := LoadFile(good, &c); err != nil || c.Capacity != 7 || c.Role != RoleOrdinary {
		t.Fatalf("LoadFile: %v, %+v", err, c)
	}
	var ce *Error
	if err := LoadFile(bad, &c); !errors.As(err, &ce) || ce.Field != "--config" {
		t.Fatalf("unknown key: %v", err)
	}
	if err := LoadFile(filepath.Join(dir, "missing"), &c); !errors.As(err, &ce) {
		t.Fatalf("missing file: %v", err)
	}
	var buf bytes.Buffer
	NewLogger(c, &buf).Debug("hello")
	if !strings.Contains(buf.String(), `"msg":"hello"`) {
		t.Fatalf("json debug logger wrote %q", buf.String())
	}
	buf.Reset()
	c.LogFormat, c.LogLevel = "text", "warn"
	NewLogger(c, &buf).Info("quiet")
	if buf.Len() != 0 {
		t.Fatalf("warn logger wrote %q", buf.String())
	}
	t.Setenv("XDG_STATE_HOME", dir)
	if d := DefaultDataDir(); d != filepath.Join(dir, "overlayd") {
		t.Fatalf("DefaultDataDir = %s", d)
	}
}
