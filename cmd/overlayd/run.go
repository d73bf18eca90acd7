package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/overlayd/overlayd/node"
	"github.com/overlayd/overlayd/node/config"
)

func dataDirFlag() cli.Flag {
	return &cli.StringFlag{
		Name:    "data-dir",
		Usage:   "directory of the identity key and the local API socket (created 0700)",
		Value:   config.DefaultDataDir(),
		EnvVars: []string{"OVERLAYD_DATA_DIR"},
	}
}

func runCommand() *cli.Command {
	d := config.Default()
	return &cli.Command{
		Name:  "run",
		Usage: "run the daemon",
		Description: "Runs an overlayd node until SIGINT or SIGTERM, then shuts down gracefully (under 5 s).\n" +
			"Every option can also be set by an environment variable (shown) or in the YAML file given\n" +
			"by --config, whose keys are the option names (e.g. `announce-interval: 10s`, `listen: [...]`).\n" +
			"Precedence: flag > environment > config file > default.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "YAML config file", EnvVars: []string{"OVERLAYD_CONFIG"}},
			dataDirFlag(),
			&cli.StringSliceFlag{Name: "listen", Usage: "multiaddr to listen on (repeatable)", Value: cli.NewStringSlice(d.Listen...), EnvVars: []string{"OVERLAYD_LISTEN"}},
			&cli.StringSliceFlag{Name: "announce-addr", Usage: "multiaddr to announce instead of the listen addresses (repeatable; for NAT or containers)", EnvVars: []string{"OVERLAYD_ANNOUNCE_ADDR"}},
			&cli.StringSliceFlag{Name: "bootstrap", Usage: "peer to join through, as /ip4/.../tcp/.../p2p/<peer-id> (repeatable)", EnvVars: []string{"OVERLAYD_BOOTSTRAP"}},
			&cli.BoolFlag{Name: "mdns", Usage: "without --bootstrap, find overlayd peers on the local network by mDNS and join through them (--mdns=false to turn off)", Value: d.MDNS, EnvVars: []string{"OVERLAYD_MDNS"}},
			&cli.BoolFlag{Name: "full-directory", Usage: "an ordinary node hears every supernode announcement and holds the whole directory instead of a partial view from its supernode (costs grow with the number of supernodes)", EnvVars: []string{"OVERLAYD_FULL_DIRECTORY"}},
			&cli.StringFlag{Name: "role", Usage: "ordinary, supernode or auto (auto promotes and demotes itself by the --auto-* rules)", Value: string(d.Role), EnvVars: []string{"OVERLAYD_ROLE"}},
			&cli.IntFlag{Name: "capacity", Usage: "ordinary nodes this node serves as a supernode", Value: d.Capacity, EnvVars: []string{"OVERLAYD_CAPACITY"}},
			&cli.DurationFlag{Name: "announce-interval", Usage: "how often a supernode announces itself; entries expire after 3 missed intervals", Value: d.AnnounceInterval, EnvVars: []string{"OVERLAYD_ANNOUNCE_INTERVAL"}},
			&cli.DurationFlag{Name: "keepalive", Usage: "session keepalive a supernode gives its clients; 3 silent intervals end a session", Value: d.Keepalive, EnvVars: []string{"OVERLAYD_KEEPALIVE"}},
			&cli.DurationFlag{Name: "busy-retry-after", Usage: "retry-after hint a full supernode sends with BUSY", Value: d.BusyRetryAfter, EnvVars: []string{"OVERLAYD_BUSY_RETRY_AFTER"}},
			&cli.IntFlag{Name: "conn-headroom", Usage: "connections a supernode accepts beyond its capacity (refused peers, other supernodes); about 0.2 MiB each", Value: d.ConnHeadroom, EnvVars: []string{"OVERLAYD_CONN_HEADROOM"}},
			&cli.IntFlag{Name: "conns-per-ip", Usage: "connections one IPv4 address (IPv6 /56) may hold; raise when many peers share a NAT address", Value: d.ConnsPerIP, EnvVars: []string{"OVERLAYD_CONNS_PER_IP"}},
			&cli.DurationFlag{Name: "retry-base", Usage: "first backoff ceiling after a failed attach pass (doubles per failure, full jitter)", Value: d.RetryBase, EnvVars: []string{"OVERLAYD_RETRY_BASE"}},
			&cli.DurationFlag{Name: "retry-max", Usage: "largest backoff ceiling", Value: d.RetryMax, EnvVars: []string{"OVERLAYD_RETRY_MAX"}},
			&cli.DurationFlag{Name: "return-interval", Usage: "mean time between a failed-over client's attempts to move back home (jittered)", Value: d.ReturnInterval, EnvVars: []string{"OVERLAYD_RETURN_INTERVAL"}},
			&cli.StringSliceFlag{Name: "operator-pubkey", Usage: "trusted operator public key (ed25519:...) for mega-supernode and supernode certificates (repeatable); makes the network certified unless --network-mode open", EnvVars: []string{"OVERLAYD_OPERATOR_PUBKEY"}},
			&cli.StringFlag{Name: "network-mode", Usage: "certified (supernodes need a supernode certificate of a trusted operator key; the default with --operator-pubkey) or open (self-asserted supernodes; operator keys certify mega-supernodes only; the default without)", EnvVars: []string{"OVERLAYD_NETWORK_MODE"}},
			&cli.StringFlag{Name: "supernode-cert", Usage: "supernode certificate file (overlayd operator promote --role supernode) that this node's announcements carry in a certified network", EnvVars: []string{"OVERLAYD_SUPERNODE_CERT"}},
			&cli.StringFlag{Name: "mega-cert", Usage: "start as a mega-supernode with this certificate file (needs --role supernode)", EnvVars: []string{"OVERLAYD_MEGA_CERT"}},
			&cli.DurationFlag{Name: "drain-period", Usage: "how long a demoted mega-supernode takes to hand extra clients back, and a demoted auto supernode all of them", Value: d.DrainPeriod, EnvVars: []string{"OVERLAYD_DRAIN_PERIOD"}},
			&cli.DurationFlag{Name: "auto-min-uptime", Usage: "--role auto: uptime before the node may promote", Value: d.AutoMinUptime, EnvVars: []string{"OVERLAYD_AUTO_MIN_UPTIME"}},
			&cli.IntFlag{Name: "auto-min-capacity", Usage: "--role auto: smallest --capacity that may promote", Value: d.AutoMinCapacity, EnvVars: []string{"OVERLAYD_AUTO_MIN_CAPACITY"}},
			&cli.Float64Flag{Name: "auto-spare-low", Usage: "--role auto: promote while the supernodes' spare capacity per attached client is below this", Value: d.AutoSpareLow, EnvVars: []string{"OVERLAYD_AUTO_SPARE_LOW"}},
			&cli.Float64Flag{Name: "auto-spare-high", Usage: "--role auto: demote while spare capacity per attached client stays above this (must exceed --auto-spare-low)", Value: d.AutoSpareHigh, EnvVars: []string{"OVERLAYD_AUTO_SPARE_HIGH"}},
			&cli.DurationFlag{Name: "auto-promote-delay-min", Usage: "--role auto: shortest random wait, with the promotion criteria holding, before promoting", Value: d.AutoPromoteDelayMin, EnvVars: []string{"OVERLAYD_AUTO_PROMOTE_DELAY_MIN"}},
			&cli.DurationFlag{Name: "auto-promote-delay-max", Usage: "--role auto: longest random wait before promoting (spreads eligible nodes over the window)", Value: d.AutoPromoteDelayMax, EnvVars: []string{"OVERLAYD_AUTO_PROMOTE_DELAY_MAX"}},
			&cli.DurationFlag{Name: "auto-demote-after", Usage: "--role auto: a surplus must last a random time within [this, 2×this] before the node demotes", Value: d.AutoDemoteAfter, EnvVars: []string{"OVERLAYD_AUTO_DEMOTE_AFTER"}},
			&cli.DurationFlag{Name: "offline-ttl", Usage: "supernode: how long a direct message for an offline peer is kept in its home cluster's store", Value: d.OfflineTTL, EnvVars: []string{"OVERLAYD_OFFLINE_TTL"}},
			&cli.Int64Flag{Name: "store-max-bytes", Usage: "supernode: bound of the on-disk store (<data-dir>/store.db: offline messages, replay logs), in bytes", Value: d.StoreMaxBytes, EnvVars: []string{"OVERLAYD_STORE_MAX_BYTES"}},
			&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error", Value: d.LogLevel, EnvVars: []string{"OVERLAYD_LOG_LEVEL"}},
			&cli.StringFlag{Name: "log-format", Usage: "text or json", Value: d.LogFormat, EnvVars: []string{"OVERLAYD_LOG_FORMAT"}},
			&cli.StringFlag{Name: "metrics-listen", Usage: "host:port for Prometheus /metrics (off when empty; loopback only unless --metrics-public)", EnvVars: []string{"OVERLAYD_METRICS_LISTEN"}},
			&cli.BoolFlag{Name: "metrics-public", Usage: "allow --metrics-listen on a non-loopback address", EnvVars: []string{"OVERLAYD_METRICS_PUBLIC"}},
			&cli.IntFlag{Name: "tunnel-window", Usage: "tunnels: flow-control window per connection and side, in bytes (0: 1 MiB)", EnvVars: []string{"OVERLAYD_TUNNEL_WINDOW"}},
			&cli.IntFlag{Name: "tunnel-max-conns", Usage: "tunnels: most open connections, both sides (0: 256; 64 per service or connect)", EnvVars: []string{"OVERLAYD_TUNNEL_MAX_CONNS"}},
			&cli.DurationFlag{Name: "tunnel-idle-timeout", Usage: "tunnels: close a connection idle this long (0: 10m)", EnvVars: []string{"OVERLAYD_TUNNEL_IDLE_TIMEOUT"}},
			&cli.Int64Flag{Name: "relay-circuit-data", Usage: "supernode: bytes per direction a relayed circuit may carry before the relay cuts it (0: 128 KiB)", EnvVars: []string{"OVERLAYD_RELAY_CIRCUIT_DATA"}},
			&cli.DurationFlag{Name: "relay-circuit-duration", Usage: "supernode: lifetime of a relayed circuit (0: 2m)", EnvVars: []string{"OVERLAYD_RELAY_CIRCUIT_DURATION"}},
			&cli.Int64Flag{Name: "relay-peer-bytes", Usage: "supernode: bytes per hour one peer may get relayed, both directions of its circuits; over it its circuits are cut and new ones refused (0: 512 × circuit data = 64 MiB; -1: unlimited)", EnvVars: []string{"OVERLAYD_RELAY_PEER_BYTES"}},
			&cli.Int64Flag{Name: "relay-peer-rate", Usage: "supernode: bytes/s one peer may get relayed (bursts of 2 s or one full circuit); over it as for --relay-peer-bytes (0: 8 × circuit data = 1 MiB/s; -1: unlimited)", EnvVars: []string{"OVERLAYD_RELAY_PEER_RATE"}},
			&cli.StringFlag{Name: "api-listen", Usage: "local API: empty for the unix socket in the data dir, a loopback host:port for TCP with a token, or off", EnvVars: []string{"OVERLAYD_API_LISTEN"}},
		},
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return usageError{fmt.Errorf("run takes no arguments, got %q", c.Args().Slice())}
			}
			cfg, err := configFrom(c)
			if err != nil {
				return err
			}
			n, err := node.New(cfg, node.WithLogger(config.NewLogger(cfg, c.App.ErrWriter)))
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return n.Run(ctx)
		},
	}
}

// configFrom builds the Config: defaults, then the file, then every option
// given by flag or environment.
func configFrom(c *cli.Context) (node.Config, error) {
	cfg := config.Default()
	if path := c.String("config"); path != "" {
		if err := config.LoadFile(path, &cfg); err != nil {
			return cfg, err
		}
	}
	set := func(name string, apply func()) {
		if c.IsSet(name) {
			apply()
		}
	}
	set("data-dir", func() { cfg.DataDir = c.String("data-dir") })
	set("listen", func() { cfg.Listen = c.StringSlice("listen") })
	set("announce-addr", func() { cfg.AnnounceAddrs = c.StringSlice("announce-addr") })
	set("bootstrap", func() { cfg.Bootstrap = c.StringSlice("bootstrap") })
	set("mdns", func() { cfg.MDNS = c.Bool("mdns") })
	set("full-directory", func() { cfg.FullDirectory = c.Bool("full-directory") })
	set("role", func() { cfg.Role = config.Role(c.String("role")) })
	set("capacity", func() { cfg.Capacity = c.Int("capacity") })
	set("announce-interval", func() { cfg.AnnounceInterval = c.Duration("announce-interval") })
	set("keepalive", func() { cfg.Keepalive = c.Duration("keepalive") })
	set("busy-retry-after", func() { cfg.BusyRetryAfter = c.Duration("busy-retry-after") })
	set("conn-headroom", func() { cfg.ConnHeadroom = c.Int("conn-headroom") })
	set("conns-per-ip", func() { cfg.ConnsPerIP = c.Int("conns-per-ip") })
	set("retry-base", func() { cfg.RetryBase = c.Duration("retry-base") })
	set("retry-max", func() { cfg.RetryMax = c.Duration("retry-max") })
	set("return-interval", func() { cfg.ReturnInterval = c.Duration("return-interval") })
	set("operator-pubkey", func() { cfg.OperatorPubkeys = c.StringSlice("operator-pubkey") })
	set("mega-cert", func() { cfg.MegaCert = c.String("mega-cert") })
	set("network-mode", func() { cfg.NetworkMode = c.String("network-mode") })
	set("supernode-cert", func() { cfg.SupernodeCert = c.String("supernode-cert") })
	set("drain-period", func() { cfg.DrainPeriod = c.Duration("drain-period") })
	set("auto-min-uptime", func() { cfg.AutoMinUptime = c.Duration("auto-min-uptime") })
	set("auto-min-capacity", func() { cfg.AutoMinCapacity = c.Int("auto-min-capacity") })
	set("auto-spare-low", func() { cfg.AutoSpareLow = c.Float64("auto-spare-low") })
	set("auto-spare-high", func() { cfg.AutoSpareHigh = c.Float64("auto-spare-high") })
	set("auto-promote-delay-min", func() { cfg.AutoPromoteDelayMin = c.Duration("auto-promote-delay-min") })
	set("auto-promote-delay-max", func() { cfg.AutoPromoteDelayMax = c.Duration("auto-promote-delay-max") })
	set("auto-demote-after", func() { cfg.AutoDemoteAfter = c.Duration("auto-demote-after") })
	set("offline-ttl", func() { cfg.OfflineTTL = c.Duration("offline-ttl") })
	set("store-max-bytes", func() { cfg.StoreMaxBytes = c.Int64("store-max-bytes") })
	set("log-level", func() { cfg.LogLevel = c.String("log-level") })
	set("log-format", func() { cfg.LogFormat = c.String("log-format") })
	set("metrics-listen", func() { cfg.MetricsListen = c.String("metrics-listen") })
	set("metrics-public", func() { cfg.MetricsPublic = c.Bool("metrics-public") })
	set("api-listen", func() { cfg.APIListen = c.String("api-listen") })
	set("tunnel-window", func() { cfg.TunnelWindow = c.Int("tunnel-window") })
	set("tunnel-max-conns", func() { cfg.TunnelMaxConns = c.Int("tunnel-max-conns") })
	set("tunnel-idle-timeout", func() { cfg.TunnelIdleTimeout = c.Duration("tunnel-idle-timeout") })
	set("relay-circuit-data", func() { cfg.RelayCircuitData = c.Int64("relay-circuit-data") })
	set("relay-circuit-duration", func() { cfg.RelayCircuitDuration = c.Duration("relay-circuit-duration") })
	set("relay-peer-bytes", func() { cfg.RelayPeerBytes = c.Int64("relay-peer-bytes") })
	set("relay-peer-rate", func() { cfg.RelayPeerRate = c.Int64("relay-peer-rate") })
	return cfg, cfg.Validate()
}
