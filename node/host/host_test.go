package host

import (
	"crypto/rand"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"

	"github.com/overlayd/overlayd/node/circuit"
	"github.com/overlayd/overlayd/node/config"
)

// TestRelayLimitsLeaveRoom: the relay's bounds follow the semaphores and
// the resource manager's relay limits sit above them and below the system
// limits, for every capacity.
func TestRelayLimitsLeaveRoom(t *testing.T) {
	for _, capacity := range []int{1, 10, 200, 10_000} {
		c := config.Default()
		c.Role, c.Capacity = config.RoleSupernode, capacity
		l := circuit.LimitsFor(c.RelaySettings(), capacity)
		if l.Reservations != capacity || l.Circuits != 4*capacity || l.PerIP != min(c.ConnsPerIP, capacity) {
			t.Fatalf("capacity %d: relay limits %+v", capacity, l)
		}
		svc, proto := circuit.ResourceLimits(c.RelaySettings(), c.Capacity)
		need := 2*l.Circuits + l.Reservations
		if int(svc.Streams) < need || int(proto.Streams) < need || int(svc.StreamsInbound) < l.Circuits+l.Reservations {
			t.Fatalf("capacity %d: rcmgr relay limits %+v / %+v below the relay's %d streams", capacity, svc, proto, need)
		}
		if system := 16 * c.ConnBudget(); int(svc.Streams) > system {
			t.Fatalf("capacity %d: relay streams %d above the system's %d", capacity, svc.Streams, system)
		}
	}
}

// TestNewHost builds a host of each role on loopback: it listens where it
// was told and has the resource manager it returns (node's
// TestNodeAgentVersion checks what identify announces).
func TestNewHost(t *testing.T) {
	for _, role := range []config.Role{config.RoleOrdinary, config.RoleSupernode, config.RoleAuto} {
		t.Run(string(role), func(t *testing.T) {
			c := config.Default()
			c.Role, c.Capacity = role, 10
			c.Listen = []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}
			key, _, err := crypto.GenerateEd25519Key(rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			h, rm, err := New(c, key, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			if len(h.Addrs()) != 2 {
				t.Errorf("addrs %v, want a TCP and a QUIC address", h.Addrs())
			}
			var sys network.ScopeStat
			if err := rm.ViewSystem(func(s network.ResourceScope) error { sys = s.Stat(); return nil }); err != nil || sys.NumConnsInbound != 0 {
				t.Errorf("system scope %+v, %v", sys, err)
			}
		})
	}
	c := config.Default()
	c.Listen = []string{"not an address"}
	key, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	if _, _, err := New(c, key, nil, nil); err == nil {
		t.Error("New with a bad listen address did not fail")
	}
}
