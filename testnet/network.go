package testnet

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Network places a scenario's node processes on a network: plain
// loopback (loopback.go), or one network namespace per node on a bridge
// with emulated wide-area links and NAT (netns.go). The runner asks the
// network where each node listens and how to start it, and nothing else,
// so that every scenario runs unchanged on either.
type Network interface {
	// Setup creates what the nodes need before any of them starts.
	Setup(ctx context.Context, nodes []Placement) error
	// Command returns the command that runs bin with args as node i,
	// inside node i's network. The caller starts and stops it.
	Command(ctx context.Context, i int, bin string, args ...string) *exec.Cmd
	// Listen is the libp2p multiaddr node i listens on at port.
	Listen(i, port int) string
	// APIBind is the host:port node i's API binds to at port, and APIURL
	// the base URL the runner reaches that API at ("" when the runner
	// cannot reach it; such a node gets no client requests).
	APIBind(i, port int) string
	APIURL(i, port int) string
	// Partition cuts all traffic between nodes of different groups until
	// Heal. Nodes in no group keep their links.
	Partition(groups [][]int) error
	Heal() error
	// Close stops what Setup started and removes what it made.
	Close() error
}

// Placement is what a network needs to know about one node.
type Placement struct {
	Name   string
	Region string  // a region of the scenario's NetworkSpec ("" on loopback)
	NAT    NATKind // the gateway it sits behind ("" for none): reachable only through relay or hole punching
	Rate   string  // access-link rate limit such as "100mbit" ("" for the region's)
}

// NetworkSpec is a scenario's network section.
type NetworkSpec struct {
	// Mode is "loopback" (the default) or "namespaces" (needs root).
	Mode    string       `yaml:"mode"`
	Regions []RegionSpec `yaml:"regions"`
	Links   []LinkSpec   `yaml:"links"`
}

// RegionSpec is one region of an internet-like network.
type RegionSpec struct {
	Name string `yaml:"name"`
	// Rate is each node's access-link rate ("1gbit", "100mbit"); "" is
	// unlimited.
	Rate string `yaml:"rate"`
	// RTT, Jitter and Loss apply between nodes of the same region.
	RTT    time.Duration `yaml:"rtt"`
	Jitter time.Duration `yaml:"jitter"`
	Loss   float64       `yaml:"loss"` // fraction of packets, 0..1
}

// LinkSpec is the path between two regions.
type LinkSpec struct {
	Between [2]string     `yaml:"between"`
	RTT     time.Duration `yaml:"rtt"`
	Jitter  time.Duration `yaml:"jitter"`
	Loss    float64       `yaml:"loss"`
}

// Network modes.
const (
	ModeLoopback   = "loopback"
	ModeNamespaces = "namespaces"
)

// ErrUnsupported is returned by a network that cannot do what was asked
// (a partition on loopback), and ErrNeedsRoot by the namespace network
// where it lacks the privileges; a runner skips such a scenario, saying
// why.
var (
	ErrUnsupported = errors.New("testnet: not supported on this network")
	ErrNeedsRoot   = errors.New("testnet: namespaces need root (CAP_NET_ADMIN)")
)

// NATKind is the kind of home-router NAT gateway a node sits behind.
// Both kinds drop unsolicited packets (address- and port-dependent
// filtering); they differ in how they map ports.
type NATKind string

// The NAT kinds a scenario may name (`nat: eim`, `nat: symmetric`;
// `nat: true` is eim).
const (
	NATNone NATKind = ""
	// NATEIM maps an internal endpoint to one external port for every
	// destination, keeping the source port where it is free
	// (endpoint-independent mapping, Linux MASQUERADE): hole punching
	// works through it.
	NATEIM NATKind = "eim"
	// NATSymmetric maps each new destination to a fresh random external
	// port (MASQUERADE --random-fully): the port a peer observes is not
	// the one the next peer will see, so hole punching fails and links
	// stay relayed.
	NATSymmetric NATKind = "symmetric"
)

// UnmarshalYAML accepts true (eim), false (none), eim and symmetric.
func (k *NATKind) UnmarshalYAML(v *yaml.Node) error {
	switch strings.ToLower(v.Value) {
	case "true", "yes", "on", "eim":
		*k = NATEIM
	case "false", "no", "off", "none", "":
		*k = NATNone
	case "symmetric":
		*k = NATSymmetric
	default:
		return fmt.Errorf("line %d: nat %q: want true, false, eim or symmetric", v.Line, v.Value)
	}
	return nil
}
