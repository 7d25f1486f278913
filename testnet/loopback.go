package testnet

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
)

// Loopback runs every node on 127.0.0.1 of this machine. It has no
// emulated links and cannot partition.
type Loopback struct{}

// NewLoopback returns the loopback network.
func NewLoopback() *Loopback { return &Loopback{} }

var _ Network = (*Loopback)(nil)

// Setup checks nothing: loopback needs nothing made.
func (*Loopback) Setup(context.Context, []Placement) error { return nil }

// Command runs bin directly on this machine.
func (*Loopback) Command(ctx context.Context, _ int, bin string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, bin, args...)
}

// Listen is a TCP multiaddr on 127.0.0.1.
func (*Loopback) Listen(_, port int) string { return fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port) }

// APIBind binds the API to 127.0.0.1 only.
func (*Loopback) APIBind(_, port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// APIURL is the API's base URL.
func (l *Loopback) APIURL(i, port int) string { return "http://" + l.APIBind(i, port) }

// Partition is not possible on one loopback interface.
func (*Loopback) Partition([][]int) error {
	return fmt.Errorf("partition: %w (loopback; use network.mode namespaces)", ErrUnsupported)
}

// Heal has nothing to undo.
func (*Loopback) Heal() error { return nil }

// Close has nothing to remove.
func (*Loopback) Close() error { return nil }
