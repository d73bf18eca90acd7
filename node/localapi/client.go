package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrNoDaemon means no daemon answered at the data dir.
var ErrNoDaemon = errors.New("no overlayd daemon is running")

// Client talks to the daemon of one data dir.
type Client struct {
	hc      *http.Client
	base    string
	token   string
	dataDir string
}

// NewClient returns a client for the daemon using dataDir. If the daemon
// wrote an API address file (TCP mode), the client uses TCP with the token;
// otherwise the unix socket. It does no I/O beyond reading those two files.
func NewClient(dataDir string) *Client {
	c := &Client{dataDir: dataDir}
	addr, errA := os.ReadFile(filepath.Join(dataDir, AddrFile))
	tok, errT := os.ReadFile(filepath.Join(dataDir, TokenFile))
	if errA == nil && errT == nil {
		c.base = "http://" + strings.TrimSpace(string(addr))
		c.token = strings.TrimSpace(string(tok))
		c.hc = &http.Client{}
		return c
	}
	sock := filepath.Join(dataDir, SocketFile)
	c.base = "http://overlayd"
	c.hc = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	return c
}

// Get fetches path into out.
func (c *Client) Get(ctx context.Context, path string, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var ne *net.OpError
		if errors.As(err, &ne) && ne.Op == "dial" {
			return fmt.Errorf("%w with data dir %s", ErrNoDaemon, c.dataDir)
		}
		return fmt.Errorf("local API %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("local API %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("daemon: %s", e.Error)
		}
		return fmt.Errorf("local API %s: %s", path, resp.Status)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("local API %s: decode: %w", path, err)
	}
	return nil
}

// Status returns the daemon's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	return s, c.Get(ctx, "/v1/status", &s)
}

// Peers returns the connected peers.
func (c *Client) Peers(ctx context.Context) ([]Peer, error) {
	var p []Peer
	return p, c.Get(ctx, "/v1/peers", &p)
}

// Supernodes returns the directory.
func (c *Client) Supernodes(ctx context.Context) ([]Supernode, error) {
	var s []Supernode
	return s, c.Get(ctx, "/v1/supernodes", &s)
}

// Ring returns the live ring.
func (c *Client) Ring(ctx context.Context) (Ring, error) {
	var r Ring
	return r, c.Get(ctx, "/v1/ring", &r)
}
