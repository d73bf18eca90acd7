package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"gopkg.in/yaml.v3"

	"github.com/overlayd/overlayd/node/circuit"
	"github.com/overlayd/overlayd/node/role"
	"github.com/overlayd/overlayd/node/tunnel"
	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/supernode"
)

// Role is the role a node is configured for.
type Role string

// Configurable roles.
const (
	RoleOrdinary  Role = "ordinary"
	RoleSupernode Role = "supernode"
	// RoleAuto lets the node decide: it starts ordinary and promotes
	// itself to supernode, or demotes itself, by the rules of role.Decide
	// (the Auto* fields).
	RoleAuto Role = "auto"
)

// APIOff, as Config.APIListen, disables the local API.
const APIOff = "off"

// Network modes (Config.NetworkMode).
const (
	// NetworkCertified: a regular supernode is admitted to the directory
	// only with a supernode certificate of a trusted operator key, and its
	// capacity is clamped to the certificate's ceiling. The default when
	// the node trusts an operator key.
	NetworkCertified = "certified"
	// NetworkOpen: regular supernodes are self-asserted; operator keys,
	// if any, certify mega-supernodes only. The default without operator
	// keys.
	NetworkOpen = "open"
)

// Config is the operator-facing configuration of a node. Field names in the
// config file (YAML) are the flag names without dashes. Precedence, applied
// by the CLI: flag > environment (OVERLAYD_*) > file > Default.
type Config struct {
	// DataDir holds the identity key, the API socket and token. Created 0700.
	DataDir string `yaml:"data-dir"`
	// Listen are the multiaddrs to listen on.
	Listen []string `yaml:"listen"`
	// AnnounceAddrs, if set, replace the listen addresses in announcements
	// (for a node behind NAT or in a container with a published port).
	AnnounceAddrs []string `yaml:"announce-addr"`
	// Bootstrap are /p2p/ multiaddrs of peers to join through.
	Bootstrap []string `yaml:"bootstrap"`
	// MDNS lets a node without Bootstrap peers find overlayd peers on its
	// local network by multicast DNS (service lan.Service) and connect to
	// a few of them (package node/lan). It has no effect with Bootstrap peers, or
	// on a node that listens on loopback addresses only. Default true.
	MDNS bool `yaml:"mdns"`
	// FullDirectory makes an ordinary node hear the supernodes'
	// announcement topic and hold the whole directory, as every node did
	// before the directory had two tiers, instead of a partial view
	// (node/viewclient). Its cost grows with the tier (about 1,000 signature
	// checks a second at 10,000 supernodes); it is there to compare the
	// two and for networks small enough not to care. Supernodes and auto
	// nodes always hold the whole directory.
	FullDirectory bool `yaml:"full-directory"`
	// Role is ordinary, supernode or auto.
	Role Role `yaml:"role"`
	// Capacity is how many ordinary nodes this node serves as a supernode.
	Capacity int `yaml:"capacity"`
	// AnnounceInterval is the directory announce period of a supernode.
	AnnounceInterval time.Duration `yaml:"announce-interval"`
	// Keepalive is the session keepalive interval a supernode gives its
	// clients; a session silent for 3 intervals is dead on both sides.
	Keepalive time.Duration `yaml:"keepalive"`
	// BusyRetryAfter is the retry-after hint a full supernode sends.
	BusyRetryAfter time.Duration `yaml:"busy-retry-after"`
	// ConnHeadroom is how many connections a supernode accepts beyond its
	// capacity: peers being refused, other supernodes, transient dials.
	// Past capacity + headroom the resource manager refuses connections
	// outright; size it by memory (about 0.2 MiB per idle connection).
	ConnHeadroom int `yaml:"conn-headroom"`
	// ConnsPerIP is how many connections one IPv4 address (or IPv6 /56)
	// may hold, and sets its new-connection rate (ConnsPerIP/40 per second,
	// burst 2×ConnsPerIP). Raise it when many peers share one NAT address.
	// Loopback is never limited.
	ConnsPerIP int `yaml:"conns-per-ip"`
	// RetryBase and RetryMax bound the client's jittered exponential
	// backoff between failed attach passes.
	RetryBase time.Duration `yaml:"retry-base"`
	RetryMax  time.Duration `yaml:"retry-max"`
	// ReturnInterval is the mean time between a failed-over client's
	// attempts to move back to its home cluster (jittered ±50%).
	ReturnInterval time.Duration `yaml:"return-interval"`
	// OperatorPubkeys are the operator public keys ("ed25519:...") whose
	// mega-supernode certificates and revocations this node trusts.
	OperatorPubkeys []string `yaml:"operator-pubkey"`
	// MegaCert is a certificate file: the node starts as a mega-supernode.
	MegaCert string `yaml:"mega-cert"`
	// NetworkMode is NetworkCertified, NetworkOpen, or empty for the
	// default: certified when OperatorPubkeys is not empty, else open.
	NetworkMode string `yaml:"network-mode"`
	// SupernodeCert is a supernode certificate file (overlayd operator
	// promote --role supernode): the node's announcements carry it, as a
	// certified network requires.
	SupernodeCert string `yaml:"supernode-cert"`
	// DrainPeriod is how long a demoted mega-supernode takes to hand the
	// clients above its regular capacity back, evenly, and how long a
	// demoted auto supernode takes to detach all its clients.
	DrainPeriod time.Duration `yaml:"drain-period"`
	// Auto* are the thresholds of --role auto (see role.Decide and
	// docs/ARCHITECTURE.md, "Roles"). AutoMinUptime and AutoMinCapacity
	// gate promotion; the network needs supernodes while the spare
	// capacity per attached client is below AutoSpareLow, and has a
	// surplus while it is above AutoSpareHigh. A promotion waits a
	// random delay within [AutoPromoteDelayMin, AutoPromoteDelayMax]
	// during which its conditions must keep holding; a surplus must last
	// a random delay within [AutoDemoteAfter, 2×AutoDemoteAfter].
	AutoMinUptime       time.Duration `yaml:"auto-min-uptime"`
	AutoMinCapacity     int           `yaml:"auto-min-capacity"`
	AutoSpareLow        float64       `yaml:"auto-spare-low"`
	AutoSpareHigh       float64       `yaml:"auto-spare-high"`
	AutoPromoteDelayMin time.Duration `yaml:"auto-promote-delay-min"`
	AutoPromoteDelayMax time.Duration `yaml:"auto-promote-delay-max"`
	AutoDemoteAfter     time.Duration `yaml:"auto-demote-after"`
	// LogLevel is debug, info, warn or error; LogFormat text or json.
	LogLevel  string `yaml:"log-level"`
	LogFormat string `yaml:"log-format"`
	// MetricsListen is host:port for Prometheus metrics; "" disables them.
	// It must be a loopback address unless MetricsPublic is set.
	MetricsListen string `yaml:"metrics-listen"`
	MetricsPublic bool   `yaml:"metrics-public"`
	// OfflineTTL is how long a supernode keeps a direct message stored
	// for an offline recipient (as the sender's supernode, the expiry it
	// asks for; as a replica, the most it grants). Default 7 days.
	OfflineTTL time.Duration `yaml:"offline-ttl"`
	// StoreMaxBytes bounds a supernode's on-disk store (<DataDir>/store.db:
	// offline messages and replay logs), in bytes. Default 1 GiB.
	StoreMaxBytes int64 `yaml:"store-max-bytes"`
	// TunnelWindow is the flow-control window of a tunnel connection, in
	// bytes: the most each side holds unacknowledged, its memory per
	// connection (0: node/tunnel's default, 1 MiB).
	TunnelWindow int `yaml:"tunnel-window"`
	// TunnelMaxConns bounds the open tunnel connections, both sides, and
	// those of one service or one connect listener (0: 256 in all, 64
	// each).
	TunnelMaxConns int `yaml:"tunnel-max-conns"`
	// TunnelIdleTimeout closes a tunnel connection idle that long (0: 10
	// minutes).
	TunnelIdleTimeout time.Duration `yaml:"tunnel-idle-timeout"`
	// RelayCircuitData and RelayCircuitDuration are a supernode's budget
	// per relayed circuit: bytes per direction and lifetime, after which
	// the relay cuts the circuit (0: 128 KiB and 2 minutes). Tunnels move
	// to a direct connection before or when a circuit is cut.
	RelayCircuitData     int64         `yaml:"relay-circuit-data"`
	RelayCircuitDuration time.Duration `yaml:"relay-circuit-duration"`
	// RelayPeerBytes and RelayPeerRate are a supernode's budgets per peer
	// on relayed traffic, both directions of every circuit the peer opened
	// or receives: bytes per hour and bytes per second (0: 512 and 8 times
	// the per-circuit data limit, 64 MiB/h and 1 MiB/s by default; -1:
	// unlimited). A peer over either has its circuits cut and new ones
	// refused until the budget refills (package node/circuit, budget.go).
	RelayPeerBytes int64 `yaml:"relay-peer-bytes"`
	RelayPeerRate  int64 `yaml:"relay-peer-rate"`
	// APIListen is where the local API listens: "" for the unix socket in
	// DataDir, a loopback host:port for TCP guarded by a bearer token kept
	// in DataDir, or "off".
	APIListen string `yaml:"api-listen"`
}

// Defaults.
const (
	DefaultCapacity         = 200
	DefaultAnnounceInterval = 10 * time.Second
	DefaultPort             = 4101
	// DefaultStoreMaxBytes bounds a supernode's store: 1 GiB.
	DefaultStoreMaxBytes = 1 << 30
	// minStoreMaxBytes is the smallest --store-max-bytes: 1 MiB.
	minStoreMaxBytes = 1 << 20
)

// DefaultDataDir is $XDG_STATE_HOME/overlayd, else ~/.local/state/overlayd,
// else ./overlayd-data when there is no home directory.
func DefaultDataDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "overlayd")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "overlayd")
	}
	return "overlayd-data"
}

// Default returns the embedded defaults.
func Default() Config {
	return Config{
		DataDir: DefaultDataDir(),
		Listen: []string{
			fmt.Sprintf("/ip4/0.0.0.0/tcp/%d", DefaultPort),
			fmt.Sprintf("/ip4/0.0.0.0/udp/%d/quic-v1", DefaultPort),
		},
		MDNS:             true,
		Role:             RoleOrdinary,
		Capacity:         DefaultCapacity,
		AnnounceInterval: DefaultAnnounceInterval,
		Keepalive:        5 * time.Second,
		BusyRetryAfter:   2 * time.Second,
		ConnHeadroom:     1024,
		ConnsPerIP:       8,
		RetryBase:        time.Second,
		RetryMax:         time.Minute,
		ReturnInterval:   30 * time.Second,
		DrainPeriod:      time.Minute,
		OfflineTTL:       supernode.DefaultOfflineTTL,
		StoreMaxBytes:    DefaultStoreMaxBytes,
		LogLevel:         "info",
		LogFormat:        "text",

		AutoMinUptime:       10 * time.Minute,
		AutoMinCapacity:     50,
		AutoSpareLow:        0.25,
		AutoSpareHigh:       1.0,
		AutoPromoteDelayMin: 30 * time.Second,
		AutoPromoteDelayMax: 5 * time.Minute,
		AutoDemoteAfter:     10 * time.Minute,
	}
}

func cfgErr(field, value, format string, args ...any) error {
	return &Error{Field: field, Value: value, Err: fmt.Errorf(format, args...)}
}

// Validate checks every field and returns an *Error for the first bad one.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return cfgErr("--data-dir", "", "must not be empty")
	}
	if len(c.Listen) == 0 {
		return cfgErr("--listen", "", "at least one listen address is needed")
	}
	if _, err := parseAddrs("--listen", c.Listen); err != nil {
		return err
	}
	if _, err := parseAddrs("--announce-addr", c.AnnounceAddrs); err != nil {
		return err
	}
	if _, err := c.BootstrapPeers(); err != nil {
		return err
	}
	switch c.Role {
	case RoleOrdinary, RoleSupernode, RoleAuto:
	default:
		return cfgErr("--role", string(c.Role), "must be one of ordinary, supernode, auto")
	}
	if c.Capacity < 0 {
		return cfgErr("--capacity", fmt.Sprint(c.Capacity), "must not be negative")
	}
	if c.Capacity > 1_000_000 {
		return cfgErr("--capacity", fmt.Sprint(c.Capacity), "must be at most 1000000")
	}
	if c.Role == RoleSupernode && c.Capacity == 0 {
		return cfgErr("--capacity", "0", "a supernode needs a capacity of at least 1")
	}
	if c.AnnounceInterval < protocol.MinAnnounceInterval || c.AnnounceInterval > protocol.MaxAnnounceInterval {
		return cfgErr("--announce-interval", c.AnnounceInterval.String(), "must be within [%v, %v]", protocol.MinAnnounceInterval, protocol.MaxAnnounceInterval)
	}
	for _, d := range []struct {
		name   string
		v      time.Duration
		lo, hi time.Duration
	}{
		{"--keepalive", c.Keepalive, 10 * time.Millisecond, 10 * time.Minute},
		{"--busy-retry-after", c.BusyRetryAfter, 0, 10 * time.Minute},
		{"--retry-base", c.RetryBase, time.Millisecond, time.Hour},
		{"--retry-max", c.RetryMax, c.RetryBase, time.Hour},
		{"--return-interval", c.ReturnInterval, 10 * time.Millisecond, 24 * time.Hour},
		{"--drain-period", c.DrainPeriod, 0, 24 * time.Hour},
		{"--auto-min-uptime", c.AutoMinUptime, 0, 30 * 24 * time.Hour},
		{"--auto-promote-delay-min", c.AutoPromoteDelayMin, 0, 24 * time.Hour},
		{"--auto-promote-delay-max", c.AutoPromoteDelayMax, c.AutoPromoteDelayMin, 24 * time.Hour},
		{"--auto-demote-after", c.AutoDemoteAfter, 0, 24 * time.Hour},
		{"--offline-ttl", c.OfflineTTL, time.Second, 365 * 24 * time.Hour},
	} {
		if d.v < d.lo || d.v > d.hi {
			return cfgErr(d.name, d.v.String(), "must be within [%v, %v]", d.lo, d.hi)
		}
	}
	if c.AutoMinCapacity < 1 || c.AutoMinCapacity > 1_000_000 {
		return cfgErr("--auto-min-capacity", fmt.Sprint(c.AutoMinCapacity), "must be within [1, 1000000]")
	}
	if !(c.AutoSpareLow >= 0 && c.AutoSpareLow <= 100) {
		return cfgErr("--auto-spare-low", fmt.Sprint(c.AutoSpareLow), "must be within [0, 100] (spare capacity per attached client)")
	}
	if !(c.AutoSpareHigh > c.AutoSpareLow && c.AutoSpareHigh <= 1000) {
		return cfgErr("--auto-spare-high", fmt.Sprint(c.AutoSpareHigh), "must be above --auto-spare-low (%v) and at most 1000: the gap is the hysteresis", c.AutoSpareLow)
	}
	if c.StoreMaxBytes < minStoreMaxBytes || c.StoreMaxBytes > 1<<50 {
		return cfgErr("--store-max-bytes", fmt.Sprint(c.StoreMaxBytes), "must be within [%d (1 MiB), %d (1 PiB)] bytes", minStoreMaxBytes, int64(1<<50))
	}
	if c.ConnHeadroom < 16 || c.ConnHeadroom > 1_000_000 {
		return cfgErr("--conn-headroom", fmt.Sprint(c.ConnHeadroom), "must be within [16, 1000000]")
	}
	if _, err := c.OperatorKeys(); err != nil {
		return err
	}
	if c.MegaCert != "" && c.Role != RoleSupernode {
		return cfgErr("--mega-cert", c.MegaCert, "a mega-supernode runs with --role supernode")
	}
	if c.MegaCert != "" && len(c.OperatorPubkeys) == 0 {
		return cfgErr("--mega-cert", c.MegaCert, "needs --operator-pubkey: the node verifies its own certificate as its peers will")
	}
	switch c.NetworkMode {
	case "", NetworkOpen:
	case NetworkCertified:
		if len(c.OperatorPubkeys) == 0 {
			return cfgErr("--network-mode", c.NetworkMode, "needs --operator-pubkey: supernode certificates are checked against the trusted operator keys")
		}
	default:
		return cfgErr("--network-mode", c.NetworkMode, "must be certified or open")
	}
	if c.SupernodeCert != "" && c.Role == RoleOrdinary {
		return cfgErr("--supernode-cert", c.SupernodeCert, "a supernode certificate is for --role supernode or auto")
	}
	if c.SupernodeCert != "" && !c.Certified() {
		return cfgErr("--supernode-cert", c.SupernodeCert, "needs a certified network (--operator-pubkey, and not --network-mode open)")
	}
	if c.TunnelWindow != 0 && (c.TunnelWindow < tunnel.MinWindow || c.TunnelWindow > tunnel.MaxWindow) {
		return cfgErr("--tunnel-window", fmt.Sprint(c.TunnelWindow), "must be 0 (default) or within [%d, %d]", tunnel.MinWindow, tunnel.MaxWindow)
	}
	if c.TunnelMaxConns < 0 || c.TunnelMaxConns > 100_000 {
		return cfgErr("--tunnel-max-conns", fmt.Sprint(c.TunnelMaxConns), "must be within [0, 100000]")
	}
	if c.TunnelIdleTimeout < 0 {
		return cfgErr("--tunnel-idle-timeout", c.TunnelIdleTimeout.String(), "must not be negative")
	}
	if c.RelayCircuitData < 0 || c.RelayCircuitData > 1<<40 {
		return cfgErr("--relay-circuit-data", fmt.Sprint(c.RelayCircuitData), "must be within [0, 1 TiB]")
	}
	if c.RelayCircuitDuration < 0 || c.RelayCircuitDuration > 24*time.Hour {
		return cfgErr("--relay-circuit-duration", c.RelayCircuitDuration.String(), "must be within [0, 24h]")
	}
	if err := validateRelayBudgets(c.RelaySettings()); err != nil {
		return err
	}
	if c.ConnsPerIP < 1 || c.ConnsPerIP > 1_000_000 {
		return cfgErr("--conns-per-ip", fmt.Sprint(c.ConnsPerIP), "must be within [1, 1000000]")
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return cfgErr("--log-level", c.LogLevel, "must be one of debug, info, warn, error")
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return cfgErr("--log-format", c.LogFormat, "must be text or json")
	}
	if c.MetricsListen != "" {
		if err := checkHostPort(c.MetricsListen, !c.MetricsPublic); err != nil {
			return cfgErr("--metrics-listen", c.MetricsListen, "%v", err)
		}
	}
	if c.APIListen != "" && c.APIListen != APIOff {
		if err := checkHostPort(c.APIListen, true); err != nil {
			return cfgErr("--api-listen", c.APIListen, "%v (the local API is for this host only)", err)
		}
	}
	return nil
}

// RolePolicy is the Config's thresholds for role.Decide, with the home
// cluster size R = cluster.Size and HomeHighLoad: what an auto node
// decides with (the simulator, testnet/sim, uses it too).
func (c *Config) RolePolicy() role.Policy {
	return role.Policy{
		MinUptime:       c.AutoMinUptime,
		MinCapacity:     c.AutoMinCapacity,
		SpareLow:        c.AutoSpareLow,
		SpareHigh:       c.AutoSpareHigh,
		HomeHighLoad:    HomeHighLoad,
		ClusterSize:     cluster.Size,
		PromoteDelayMin: c.AutoPromoteDelayMin,
		PromoteDelayMax: c.AutoPromoteDelayMax,
		DemoteAfter:     c.AutoDemoteAfter,
	}
}

// HomeHighLoad is the load fraction at which a home cluster member counts
// as full for --role auto.
const HomeHighLoad = 0.9

func checkHostPort(s string, loopbackOnly bool) error {
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New("want host:port")
	}
	if !loopbackOnly {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return errors.New("must be a loopback address")
	}
	return nil
}

func parseAddrs(field string, ss []string) ([]ma.Multiaddr, error) {
	out := make([]ma.Multiaddr, 0, len(ss))
	for _, s := range ss {
		a, err := ma.NewMultiaddr(strings.TrimSpace(s))
		if err != nil {
			return nil, cfgErr(field, s, "not a multiaddr: %v", err)
		}
		out = append(out, a)
	}
	return out, nil
}

// BootstrapPeers are the Bootstrap addresses as peers; Validate checks
// them.
func (c *Config) BootstrapPeers() ([]peer.AddrInfo, error) {
	addrs, err := parseAddrs("--bootstrap", c.Bootstrap)
	if err != nil {
		return nil, err
	}
	for i, a := range addrs {
		if _, err := peer.AddrInfoFromP2pAddr(a); err != nil {
			return nil, cfgErr("--bootstrap", c.Bootstrap[i], "must end in /p2p/<peer-id>: %v", err)
		}
	}
	infos, err := peer.AddrInfosFromP2pAddrs(addrs...)
	if err != nil {
		return nil, cfgErr("--bootstrap", strings.Join(c.Bootstrap, ","), "%v", err)
	}
	return infos, nil
}

// Certified reports whether the node runs in a certified network: with
// NetworkMode certified, or unset and at least one operator key trusted.
func (c *Config) Certified() bool {
	switch c.NetworkMode {
	case NetworkCertified:
		return true
	case NetworkOpen:
		return false
	}
	return len(c.OperatorPubkeys) > 0
}

// OperatorKeys are the trusted OperatorPubkeys, decoded; Validate checks
// them.
func (c *Config) OperatorKeys() ([]crypto.PubKey, error) {
	var ks []crypto.PubKey
	for _, s := range c.OperatorPubkeys {
		k, err := protocol.DecodeKey(s)
		if err != nil {
			return nil, cfgErr("--operator-pubkey", s, "%v", err)
		}
		ks = append(ks, k)
	}
	return ks, nil
}

// LoadFile reads a YAML config file onto c: keys present in the file
// replace c's values, the others are kept. Unknown keys are an error.
func LoadFile(path string, c *Config) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return cfgErr("--config", path, "%v", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return cfgErr("--config", path, "%s", strings.ReplaceAll(err.Error(), "\n", ";"))
	}
	return nil
}

// validateRelayBudgets checks the budget flags against the circuit limit.
func validateRelayBudgets(s circuit.Settings) error {
	full := 2 * s.CircuitDataLimit()
	if s.PeerBytes < -1 || (s.PeerBytes > 0 && s.PeerBytes < full) {
		return cfgErr("--relay-peer-bytes", fmt.Sprint(s.PeerBytes),
			"must be 0 (default), -1 (unlimited) or at least one full circuit, 2 × --relay-circuit-data = %d bytes (a peer is charged both directions): a smaller budget would cut every circuit before its own limit; lower --relay-circuit-data instead", full)
	}
	if s.PeerRate < -1 || (s.PeerRate > 0 && s.PeerRate < circuit.MinPeerRate) {
		return cfgErr("--relay-peer-rate", fmt.Sprint(s.PeerRate),
			"must be 0 (default), -1 (unlimited) or at least %d bytes/s", circuit.MinPeerRate)
	}
	return nil
}

// RelaySettings are the circuit relay settings of c (package node/circuit).
func (c Config) RelaySettings() circuit.Settings {
	return circuit.Settings{
		CircuitData:     c.RelayCircuitData,
		CircuitDuration: c.RelayCircuitDuration,
		PeerBytes:       c.RelayPeerBytes,
		PeerRate:        c.RelayPeerRate,
		ConnsPerIP:      c.ConnsPerIP,
	}
}

// ListenAddrs are the Listen addresses, parsed; Validate checks them.
func (c Config) ListenAddrs() ([]ma.Multiaddr, error) { return parseAddrs("--listen", c.Listen) }

// AnnounceMultiaddrs are the AnnounceAddrs, parsed (nil when there are
// none); Validate checks them.
func (c Config) AnnounceMultiaddrs() ([]ma.Multiaddr, error) {
	if len(c.AnnounceAddrs) == 0 {
		return nil, nil
	}
	return parseAddrs("--announce-addr", c.AnnounceAddrs)
}

// PartialView reports whether a node keeps a partial view of the
// directory (node/viewclient) instead of hearing the announcement topic:
// a pinned ordinary node, unless FullDirectory. An auto node is a
// candidate supernode and needs the whole directory for its role rules.
func (c Config) PartialView() bool { return c.Role == RoleOrdinary && !c.FullDirectory }

// ConnBudget is how many connections a node may hold: a supernode its
// clients plus the headroom (peers being refused, other supernodes,
// transient dials); an ordinary node only the headroom.
func (c Config) ConnBudget() int {
	if c.Role == RoleOrdinary {
		return c.ConnHeadroom
	}
	return c.Capacity + c.ConnHeadroom
}
