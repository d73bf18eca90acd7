package config

import (
	"crypto/rand"
	"errors"
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
