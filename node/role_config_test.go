package node

import (
	"errors"
	"testing"
	"time"

	"github.com/overlayd/overlayd/overlay/cluster"
)

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
			c := DefaultConfig()
			c.DataDir = t.TempDir()
			tt.tweak(&c)
			err := c.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.field {
				t.Fatalf("err = %v, want a ConfigError naming %s", err, tt.field)
			}
		})
	}
}

// TestAutoRolePolicyFromConfig: the flags, HomeHighLoad and cluster.Size
// reach the policy role.Decide is given.
func TestAutoRolePolicyFromConfig(t *testing.T) {
	c := DefaultConfig()
	c.AutoSpareLow, c.AutoSpareHigh, c.AutoMinCapacity = 0.1, 0.9, 7
	p := c.RolePolicy()
	if p.SpareLow != 0.1 || p.SpareHigh != 0.9 || p.MinCapacity != 7 || p.ClusterSize != cluster.Size || p.HomeHighLoad != HomeHighLoad ||
		p.PromoteDelayMin != c.AutoPromoteDelayMin || p.PromoteDelayMax != c.AutoPromoteDelayMax || p.DemoteAfter != c.AutoDemoteAfter || p.MinUptime != c.AutoMinUptime {
		t.Fatalf("policy %+v from config", p)
	}
}
