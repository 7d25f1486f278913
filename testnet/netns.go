//go:build linux

package testnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The internet-like network: every node in a network namespace of its
// own, on one bridge in a hub namespace, with emulated wide-area paths.
//
//	root ns ── <tag>-r (10.213.K.254) ─┐
//	                                   │ hub ns: bridge br0, iptables
//	<tag>-n1: eth0 192.0.0.65 ─────────┤   FORWARD: partition drops, then
//	<tag>-n2: eth0 192.0.0.66 ─────────┤   NFQUEUE to the delayer
//	<tag>-g3: eth0 192.0.0.67 ─────────┘   (MASQUERADE gateway)
//	   └─ in0 192.168.100.1 ── <tag>-n3: eth0 192.168.100.2 (behind NAT)
//
// Addresses. Nodes talk to each other on 192.0.0.64/26, a block of the
// IETF protocol-assignment range 192.0.0.0/24 that is never routed on
// the internet, yet which libp2p counts as public (manet.IsPublicAddr
// lists only 192.0.0.0/26 of it): libp2p hole punches, and AutoNAT
// dials back, only over public addresses, so private ranges would make
// a NAT test that can never punch. The block is routed only inside the
// run's namespaces, never in the root namespace, so the host's own
// traffic cannot be diverted; each run has its own hub, so concurrent
// runs reuse it without meeting. The runner in the root namespace
// reaches the APIs on a second, per-run subnet 10.213.K.0/24 that the
// root namespace gets one address on. No namespace has a default route,
// and nothing forwards to the host's interfaces.
//
// Wide-area paths. Where the kernel lacks tc netem (as Firecracker's
// does), delay, jitter and loss are applied by the delayer
// (delay_nfqueue.go) to every packet between two node addresses as it
// crosses the hub; it is used on every kernel, so that runs behave the
// same everywhere. Access rates are tbf qdiscs on both ends of each
// node's link to the hub (upload on the node's side, download on the
// hub's).
//
// NAT. A Placement with NAT gets a gateway namespace that masquerades
// its private subnet onto the bridge and drops unsolicited packets
// (drops rather than resets, so that simultaneous TCP opens of a hole
// punch survive the first SYN). The gateway is of one of two kinds home
// routers come in: endpoint-independent mapping (eim: one external port
// per internal endpoint, the source port kept), where hole punching
// works, or symmetric (a random external port per destination), where
// it cannot and links stay relayed. Nothing routes to 192.168.100.0/24 from
// the bridge: the node can dial out but cannot be dialled, except
// through a relay or after hole punching. Its API is forwarded from the
// gateway's 10.213.K address for the runner only.

// Address plan.
var (
	nsPublicBase = netip.MustParseAddr("192.0.0.64") // node i: .65+i
	nsPublicNet  = netip.MustParsePrefix("192.0.0.64/26")
	nsNATNode    = netip.MustParseAddr("192.168.100.2")
	nsNATGateway = netip.MustParseAddr("192.168.100.1")
)

const (
	nsMaxNodes = 60
	nsQueue    = 0 // the NFQUEUE number in the hub; queues are per namespace
	nsPartPref = "STRATA-PART"
	// NamespacePrefix starts the names of everything a run makes: its
	// namespaces (<tag>-hub, <tag>-n1, ...) and its root-side veth
	// (<tag>-r), where tag is NamespacePrefix and a number.
	NamespacePrefix = "st"
)

// NamespaceOption configures NewNamespaces.
type NamespaceOption func(*nsOptions)

type nsOptions struct {
	tag  string
	seed uint64
	logf func(format string, args ...any)
}

// WithNamespaceTag names the run's namespaces <tag>-... instead of a
// free st<NNN>; a test uses it to know what to look for after Close.
func WithNamespaceTag(tag string) NamespaceOption { return func(o *nsOptions) { o.tag = tag } }

// WithDelaySeed seeds the delayer's jitter and loss (default 1).
func WithDelaySeed(seed uint64) NamespaceOption { return func(o *nsOptions) { o.seed = seed } }

// WithNamespaceLog receives a line for each step of Setup and Close.
func WithNamespaceLog(logf func(format string, args ...any)) NamespaceOption {
	return func(o *nsOptions) { o.logf = logf }
}

// Namespaces is the internet-like Network; see the comment above.
type Namespaces struct {
	spec  NetworkSpec
	model pathModel
	opts  nsOptions

	mu       sync.Mutex
	tag      string
	apiNet   int // K of 10.213.K.0/24
	nodes    []nsNode
	made     []string // namespaces made, in order
	rootLink string
	delayer  *delayer
	closed   bool
}

type nsNode struct {
	p      Placement
	ns     string     // where the node runs
	gw     string     // its NAT gateway's namespace, or ""
	pub    netip.Addr // where other nodes reach it (its gateway's for NAT)
	listen netip.Addr // the address it listens on
	api    netip.Addr // where the runner reaches its API
}

var _ Network = (*Namespaces)(nil)

// NewNamespaces returns the internet-like network of spec. It checks
// the privileges and tools it needs and the spec's paths; Setup makes
// the namespaces.
func NewNamespaces(spec NetworkSpec, opts ...NamespaceOption) (Network, error) {
	return newNamespaces(spec, opts...)
}

func newNamespaces(spec NetworkSpec, opts ...NamespaceOption) (*Namespaces, error) {
	o := nsOptions{seed: 1, logf: func(string, ...any) {}}
	for _, f := range opts {
		f(&o)
	}
	if ok, why := hasNetAdmin(); !ok {
		return nil, fmt.Errorf("namespace network: %w: %s (run as root, e.g. sudo)", ErrNeedsRoot, why)
	}
	for _, tool := range []string{"ip", "tc", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("namespace network: %w: %s not found (apt-get install -y iproute2 iptables)", ErrUnsupported, tool)
		}
	}
	model, err := newPathModel(spec)
	if err != nil {
		return nil, fmt.Errorf("namespace network: %w", err)
	}
	for _, r := range spec.Regions {
		if _, err := nsParseRate(r.Rate); err != nil {
			return nil, fmt.Errorf("namespace network: region %s: %w", r.Name, err)
		}
	}
	// The API subnet is chosen now, not in Setup: a runner may ask for
	// APIURL before Setup, and it depends only on K and the node's index.
	k, err := nsFreeAPINet(context.Background(), os.Getpid())
	if err != nil {
		return nil, err
	}
	return &Namespaces{spec: spec, model: model, opts: o, apiNet: k}, nil
}

// Tag is the prefix of everything this run made (after Setup).
func (n *Namespaces) Tag() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.tag
}

// Setup makes the hub, one namespace per node (and a gateway per NAT
// node), the links with their rates, and starts the delayer. On error it
// removes what it made.
func (n *Namespaces) Setup(ctx context.Context, nodes []Placement) (err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.tag != "" {
		return errors.New("namespace network: Setup once, before Close")
	}
	if len(nodes) == 0 || len(nodes) > nsMaxNodes {
		return fmt.Errorf("namespace network: %d nodes (1..%d)", len(nodes), nsMaxNodes)
	}
	regions := map[string]RegionSpec{}
	for _, r := range n.spec.Regions {
		regions[r.Name] = r
	}
	for _, p := range nodes {
		if _, ok := regions[p.Region]; !ok {
			return fmt.Errorf("namespace network: node %s: region %q is not in network.regions", p.Name, p.Region)
		}
		if _, err := nsParseRate(p.Rate); err != nil {
			return fmt.Errorf("namespace network: node %s: %w", p.Name, err)
		}
		if p.NAT != NATNone && p.NAT != NATEIM && p.NAT != NATSymmetric {
			return fmt.Errorf("namespace network: node %s: NAT kind %q (want eim or symmetric)", p.Name, p.NAT)
		}
	}
	defer func() {
		if err != nil {
			if cerr := n.closeLocked(); cerr != nil {
				err = fmt.Errorf("%w (and cleaning up: %v)", err, cerr)
			}
		}
	}()
	if err := n.makeHub(ctx); err != nil {
		return err
	}
	n.opts.logf("namespace network %s: hub %s, APIs on 10.213.%d.0/24", n.tag, n.ns("hub"), n.apiNet)
	regionOf := map[netip.Addr]string{}
	for i, p := range nodes {
		nd, err := n.makeNode(ctx, i, p, regions[p.Region])
		if err != nil {
			return fmt.Errorf("namespace network: node %s: %w", p.Name, err)
		}
		n.nodes = append(n.nodes, nd)
		regionOf[nd.pub] = p.Region
		n.opts.logf("namespace network %s: %s in %s at %s (nat %q, api %s)", n.tag, p.Name, nd.ns, nd.pub, p.NAT, nd.api)
	}
	d, err := startDelayer("/run/netns/"+n.ns("hub"), nsQueue, n.model, regionOf, n.opts.seed)
	if err != nil {
		return fmt.Errorf("namespace network: %w", err)
	}
	n.delayer = d
	return nil
}

func (n *Namespaces) ns(name string) string { return n.tag + "-" + name }

// makeHub picks a free tag, makes the hub namespace with its bridge and
// firewall, and links the root namespace to it.
func (n *Namespaces) makeHub(ctx context.Context) error {
	if n.opts.tag != "" {
		n.tag = n.opts.tag
		if err := n.addNetns(ctx, n.ns("hub")); err != nil {
			return err
		}
	} else {
		// Try tags from the pid on; `ip netns add` fails on a name in use,
		// which settles races between concurrent runs.
		base := os.Getpid() % 1000
		for k := 0; ; k++ {
			if k == 1000 {
				return errors.New("namespace network: no free tag st000..st999 (leftovers? see CleanNamespaces)")
			}
			n.tag = fmt.Sprintf("%s%03d", NamespacePrefix, (base+k)%1000)
			if _, err := os.Stat("/run/netns/" + n.ns("hub")); err == nil {
				continue
			}
			if shRun(ctx, "ip", "netns", "add", n.ns("hub")) == nil {
				n.made = append(n.made, n.ns("hub"))
				break
			}
		}
		if err := n.prepareNetns(ctx, n.ns("hub")); err != nil {
			return err
		}
	}
	hub := n.ns("hub")
	if err := n.nsRun(ctx, hub,
		[]string{"ip", "link", "add", "br0", "type", "bridge"},
		[]string{"ip", "link", "set", "br0", "up"},
		// Bridged IPv4 traverses iptables (per namespace since Linux 5.3).
		[]string{"sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1"},
		[]string{"iptables", "-w", "-N", nsPartPref},
		[]string{"iptables", "-w", "-A", "FORWARD", "-j", nsPartPref},
		// --queue-bypass: without a delayer bound, packets pass undelayed.
		[]string{"iptables", "-w", "-A", "FORWARD", "-s", nsPublicNet.String(), "-d", nsPublicNet.String(),
			"-j", "NFQUEUE", "--queue-num", strconv.Itoa(nsQueue), "--queue-bypass"},
	); err != nil {
		return err
	}
	// Another run may have taken K since NewNamespaces.
	if k, err := nsFreeAPINet(ctx, n.apiNet); err != nil {
		return err
	} else if k != n.apiNet {
		return fmt.Errorf("namespace network: 10.213.%d.0/24 was taken since NewNamespaces", n.apiNet)
	}
	k := n.apiNet
	n.rootLink = n.ns("r")
	if err := shRun(ctx, "ip", "link", "add", n.rootLink, "type", "veth", "peer", "name", "root", "netns", hub); err != nil {
		n.rootLink = "" // not made: nothing of that name is ours to delete
		return err
	}
	return errors.Join(
		shRun(ctx, "ip", "addr", "add", fmt.Sprintf("10.213.%d.254/24", k), "dev", n.rootLink),
		shRun(ctx, "ip", "link", "set", n.rootLink, "up"),
		n.nsRun(ctx, hub, []string{"ip", "link", "set", "root", "master", "br0", "up"}),
	)
}

// makeNode makes node i's namespace (and gateway) and its link.
func (n *Namespaces) makeNode(ctx context.Context, i int, p Placement, r RegionSpec) (nsNode, error) {
	hub := n.ns("hub")
	pub := nsPublicBase
	for range i + 1 {
		pub = pub.Next()
	}
	nd := nsNode{p: p, ns: n.ns(fmt.Sprintf("n%d", i+1)), pub: pub, listen: pub,
		api: n.apiAddr(i)}
	edge := nd.ns // the namespace whose eth0 is on the bridge
	if p.NAT != NATNone {
		nd.gw = n.ns(fmt.Sprintf("g%d", i+1))
		nd.listen = nsNATNode
		edge = nd.gw
	}
	if err := n.addNetns(ctx, edge); err != nil {
		return nd, err
	}
	if p.NAT != NATNone {
		if err := n.addNetns(ctx, nd.ns); err != nil {
			return nd, err
		}
	}
	port := fmt.Sprintf("n%d", i+1) // the hub's end of the link
	if err := n.nsRun(ctx, hub,
		[]string{"ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", edge},
		[]string{"ip", "link", "set", port, "master", "br0", "up"},
	); err != nil {
		return nd, err
	}
	if err := n.nsRun(ctx, edge,
		[]string{"ip", "addr", "add", nd.pub.String() + "/26", "dev", "eth0"},
		[]string{"ip", "addr", "add", nd.api.String() + "/24", "dev", "eth0"},
		[]string{"ip", "link", "set", "eth0", "up"},
	); err != nil {
		return nd, err
	}
	rate := p.Rate
	if rate == "" {
		rate = r.Rate
	}
	if rate != "" {
		bps, _ := nsParseRate(rate)
		if err := errors.Join(n.tbf(ctx, edge, "eth0", rate, bps), n.tbf(ctx, hub, port, rate, bps)); err != nil {
			return nd, err
		}
	}
	if p.NAT == NATNone {
		return nd, nil
	}
	gw, node := nd.gw, nd.ns
	priv := netip.PrefixFrom(nsNATNode, 24).Masked().String()
	err := errors.Join(
		n.nsRun(ctx, gw, []string{"ip", "link", "add", "in0", "type", "veth", "peer", "name", "eth0", "netns", node}),
		n.nsRun(ctx, gw,
			[]string{"ip", "addr", "add", nsNATGateway.String() + "/24", "dev", "in0"},
			[]string{"ip", "link", "set", "in0", "up"},
			[]string{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
			// Outbound connections leave with the gateway's address: on
			// the same port for every destination (eim) or on a random
			// port per destination (symmetric).
			append([]string{"iptables", "-w", "-t", "nat", "-A", "POSTROUTING", "-s", priv, "-o", "eth0", "-j", "MASQUERADE"}, natMapping(p.NAT)...),
			// The runner's API requests reach the node (only from the root
			// namespace's address: other nodes cannot use this to dial in).
			[]string{"iptables", "-w", "-t", "nat", "-A", "PREROUTING", "-i", "eth0", "-s", fmt.Sprintf("10.213.%d.254", n.apiNet),
				"-d", nd.api.String(), "-j", "DNAT", "--to-destination", nsNATNode.String()},
			// Unsolicited packets die silently, as at most home routers.
			[]string{"iptables", "-w", "-A", "INPUT", "-i", "eth0", "-j", "DROP"},
			[]string{"iptables", "-w", "-A", "FORWARD", "-i", "eth0", "-m", "conntrack", "!", "--ctstate", "ESTABLISHED,RELATED,DNAT", "-j", "DROP"},
		),
		n.nsRun(ctx, node,
			[]string{"ip", "addr", "add", nsNATNode.String() + "/24", "dev", "eth0"},
			[]string{"ip", "link", "set", "eth0", "up"},
			// Routes to the bridge's nodes and to the runner, not a default
			// route: nothing beyond the run's namespaces is reachable.
			[]string{"ip", "route", "add", nsPublicNet.String(), "via", nsNATGateway.String()},
			[]string{"ip", "route", "add", fmt.Sprintf("10.213.%d.254/32", n.apiNet), "via", nsNATGateway.String()},
		),
	)
	return nd, err
}

// natMapping is the MASQUERADE options of a NAT kind. Plain MASQUERADE
// keeps the source port unless another connection holds it, so one
// internal endpoint maps to one external port for all destinations.
// --random-fully draws the port at random for every new connection
// (every new destination, for UDP), as symmetric NATs do.
func natMapping(k NATKind) []string {
	if k == NATSymmetric {
		return []string{"--random-fully"}
	}
	return nil
}

// tbf limits dev's egress to rate. The bucket holds about 5 ms of
// traffic (at least 64 KiB, so that GSO packets pass whole); the queue
// holds at most 50 ms, as a home router's might.
func (n *Namespaces) tbf(ctx context.Context, ns, dev, rate string, bps uint64) error {
	burst := max(bps/8/200, 64<<10)
	return n.nsRun(ctx, ns, []string{"tc", "qdisc", "replace", "dev", dev, "root", "tbf",
		"rate", rate, "burst", strconv.FormatUint(burst, 10), "latency", "50ms"})
}

// addNetns makes a namespace with loopback up and IPv6 off (so that no
// link-local traffic bypasses the emulated paths), and records it for
// Close.
func (n *Namespaces) addNetns(ctx context.Context, name string) error {
	if err := shRun(ctx, "ip", "netns", "add", name); err != nil {
		return err
	}
	n.made = append(n.made, name)
	return n.prepareNetns(ctx, name)
}

func (n *Namespaces) prepareNetns(ctx context.Context, name string) error {
	// IPv6 may be compiled out; then there is nothing to turn off.
	_ = n.nsRun(ctx, name, []string{"sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"})
	return n.nsRun(ctx, name, []string{"ip", "link", "set", "lo", "up"})
}

// nsRun runs each command inside namespace ns, stopping at the first
// error.
func (n *Namespaces) nsRun(ctx context.Context, ns string, cmds ...[]string) error {
	for _, c := range cmds {
		if err := shRun(ctx, append([]string{"ip", "netns", "exec", ns}, c...)...); err != nil {
			return err
		}
	}
	return nil
}

// shRun runs a command, with its output in the error.
func shRun(ctx context.Context, args ...string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// nsFreeAPINet picks K for 10.213.K.0/24 that no address or route of the
// root namespace touches, trying from 1+from%254 on.
func nsFreeAPINet(ctx context.Context, from int) (int, error) {
	var used bytes.Buffer
	for _, args := range [][]string{{"ip", "-4", "-o", "addr", "show"}, {"ip", "-4", "route", "show", "table", "all"}} {
		out, err := exec.CommandContext(ctx, args[0], args[1:]...).Output()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", strings.Join(args, " "), err)
		}
		used.Write(out)
	}
	for k := range 254 {
		K := (from-1+k)%254 + 1
		if !bytes.Contains(used.Bytes(), fmt.Appendf(nil, "10.213.%d.", K)) {
			return K, nil
		}
	}
	return 0, errors.New("namespace network: no free 10.213.K.0/24 for the APIs")
}

func (n *Namespaces) node(i int) (nsNode, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if i < 0 || i >= len(n.nodes) {
		return nsNode{}, false
	}
	return n.nodes[i], true
}

// Command runs bin inside node i's namespace. For `strata node` it adds
// the flags the network implies unless args give them: --region, and
// --reachability, since AutoNAT would need several peers' dial-backs
// (seconds to minutes) to reach the answer the network already knows:
// public on the bridge (such nodes serve as relays), private behind NAT
// (the node reserves relay slots at once, and its peers reach it through
// them until DCUtR upgrades the link).
func (n *Namespaces) Command(ctx context.Context, i int, bin string, args ...string) *exec.Cmd {
	nd, ok := n.node(i)
	if !ok {
		// A command that fails at Start, naming the problem.
		return exec.CommandContext(ctx, "/nonexistent/namespace-network-has-no-node-"+strconv.Itoa(i))
	}
	if len(args) > 0 && args[0] == "node" {
		has := func(flag string) bool {
			return slices.ContainsFunc(args, func(a string) bool { return a == flag || strings.HasPrefix(a, flag+"=") })
		}
		if nd.p.Region != "" && !has("--region") {
			args = append(args, "--region", nd.p.Region)
		}
		if !has("--reachability") {
			reach := "public"
			if nd.p.NAT != NATNone {
				reach = "private"
			}
			args = append(args, "--reachability", reach)
		}
	}
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", nd.ns, bin}, args...)...)
}

// Listen is a TCP multiaddr on node i's own address (its private one
// behind NAT). Like APIBind, it is known only after Setup.
func (n *Namespaces) Listen(i, port int) string {
	nd, _ := n.node(i)
	return fmt.Sprintf("/ip4/%s/tcp/%d", nd.listen, port)
}

// ListenQUIC is the QUIC multiaddr beside Listen, on the same port
// number: behind NAT hole punching gets through over UDP far more often
// than by TCP simultaneous open, so the runner's nodes listen on both.
func (n *Namespaces) ListenQUIC(i, port int) string {
	nd, _ := n.node(i)
	return fmt.Sprintf("/ip4/%s/udp/%d/quic-v1", nd.listen, port)
}

// APIBind binds node i's API to its API address (its private address
// behind NAT, which the gateway forwards to).
func (n *Namespaces) APIBind(i, port int) string {
	nd, _ := n.node(i)
	host := nd.api
	if nd.p.NAT != NATNone {
		host = nsNATNode
	}
	return net.JoinHostPort(host.String(), strconv.Itoa(port))
}

// APIURL is the API's URL from the root namespace. It may be asked
// before Setup.
func (n *Namespaces) APIURL(i, port int) string {
	if i < 0 || i >= nsMaxNodes {
		return ""
	}
	return "http://" + net.JoinHostPort(n.apiAddr(i).String(), strconv.Itoa(port))
}

// apiAddr is node i's API address: on its own eth0, or its gateway's.
func (n *Namespaces) apiAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 213, byte(n.apiNet), byte(i + 1)})
}

// Addr is the address other nodes reach node i at (its gateway's
// behind NAT).
func (n *Namespaces) Addr(i int) netip.Addr {
	nd, _ := n.node(i)
	return nd.pub
}

// Namespace is the namespace node i runs in.
func (n *Namespaces) Namespace(i int) string {
	nd, _ := n.node(i)
	return nd.ns
}

// Partition drops, in the hub, every packet between nodes of different
// groups. It replaces an earlier partition.
func (n *Namespaces) Partition(groups [][]int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.tag == "" {
		return errors.New("partition: namespace network not set up")
	}
	group := map[int]int{}
	for g, members := range groups {
		for _, i := range members {
			if i < 0 || i >= len(n.nodes) {
				return fmt.Errorf("partition: no node %d", i)
			}
			if _, dup := group[i]; dup {
				return fmt.Errorf("partition: node %d in two groups", i)
			}
			group[i] = g
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hub := n.ns("hub")
	cmds := [][]string{{"iptables", "-w", "-F", nsPartPref}}
	for a, ga := range group {
		for b, gb := range group {
			if ga != gb {
				cmds = append(cmds, []string{"iptables", "-w", "-A", nsPartPref,
					"-s", n.nodes[a].pub.String(), "-d", n.nodes[b].pub.String(), "-j", "DROP"})
			}
		}
	}
	if err := n.nsRun(ctx, hub, cmds...); err != nil {
		return fmt.Errorf("partition: %w", err)
	}
	return nil
}

// Heal removes the partition's drops.
func (n *Namespaces) Heal() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.tag == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.nsRun(ctx, n.ns("hub"), []string{"iptables", "-w", "-F", nsPartPref}); err != nil {
		return fmt.Errorf("heal: %w", err)
	}
	return nil
}

// Degrade drops a share loss of node i's packets, to and from it, and
// delays the rest by delay, until Restore.
func (n *Namespaces) Degrade(i int, delay time.Duration, loss float64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.delayer == nil || i < 0 || i >= len(n.nodes) {
		return fmt.Errorf("degrade: no node %d on a set-up network", i)
	}
	if loss < 0 || loss >= 1 || delay < 0 {
		return fmt.Errorf("degrade: loss %v outside [0, 1) or negative delay %v", loss, delay)
	}
	n.delayer.degrade(n.nodes[i].pub, pathSpec{OneWay: delay, Loss: loss})
	return nil
}

// Restore undoes Degrade of node i.
func (n *Namespaces) Restore(i int) error { return n.Degrade(i, 0, 0) }

// DelayStats are the delayer's counts of packets queued, dropped and
// released so far.
func (n *Namespaces) DelayStats() (queued, dropped, accepted int64) {
	n.mu.Lock()
	d := n.delayer
	n.mu.Unlock()
	if d == nil {
		return 0, 0, 0
	}
	return d.stats.Queued.Load(), d.stats.Dropped.Load(), d.stats.Accepted.Load()
}

// Close stops the delayer and removes every namespace, and with them
// their links, qdiscs and firewall rules, and the root namespace's veth.
// Processes still running in the namespaces (started through Command)
// are killed. It may be called more than once.
func (n *Namespaces) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closeLocked()
}

func (n *Namespaces) closeLocked() error {
	if n.closed {
		return nil
	}
	n.closed = true
	var errs []error
	if n.delayer != nil {
		errs = append(errs, n.delayer.Close())
		n.delayer = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	made := slices.Clone(n.made)
	slices.Reverse(made)
	errs = append(errs, removeNetns(ctx, made, n.rootLink))
	n.opts.logf("namespace network %s: removed %d namespaces", n.tag, len(made))
	return errors.Join(errs...)
}

// removeNetns kills what still runs in the namespaces, deletes them, and
// deletes rootLink if it outlived them.
func removeNetns(ctx context.Context, names []string, rootLink string) error {
	var errs []error
	for _, ns := range names {
		if out, err := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output(); err == nil {
			for f := range strings.FieldsSeq(string(out)) {
				if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	}
	for _, ns := range names {
		if err := shRun(ctx, "ip", "netns", "del", ns); err != nil {
			if _, serr := os.Stat("/run/netns/" + ns); serr == nil {
				errs = append(errs, err)
			}
		}
	}
	// The root veth dies with its peer in the hub; this only catches a
	// hub that was never made.
	if rootLink != "" {
		errs = append(errs, delLink(ctx, rootLink))
	}
	return errors.Join(errs...)
}

// delLink deletes a root-namespace link if it is there. A veth goes by
// itself, a moment after its peer's namespace is deleted, so a link that
// vanished while being deleted is not an error.
func delLink(ctx context.Context, name string) error {
	if _, err := net.InterfaceByName(name); err != nil {
		return nil
	}
	err := shRun(ctx, "ip", "link", "del", name)
	if _, gone := net.InterfaceByName(name); gone != nil {
		return nil
	}
	return err
}

var nsTagPattern = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

// CleanNamespaces removes the leftovers of runs that died without Close:
// every namespace named <tag>-* and root veth <tag>-r whose tag starts
// with prefix (NamespacePrefix for all runs; a run's Tag for one). Do not
// call it while another run is alive. It returns what it removed.
func CleanNamespaces(ctx context.Context, prefix string) ([]string, error) {
	if !nsTagPattern.MatchString(prefix) {
		return nil, fmt.Errorf("clean namespaces: prefix %q: want lower-case letters and digits", prefix)
	}
	entries, err := os.ReadDir("/run/netns")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("clean namespaces: %w", err)
	}
	var names []string
	for _, e := range entries {
		if tag, _, ok := strings.Cut(e.Name(), "-"); ok && strings.HasPrefix(tag, prefix) && nsTagPattern.MatchString(tag) {
			names = append(names, e.Name())
		}
	}
	var links []string
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		if tag, rest, ok := strings.Cut(ifc.Name, "-"); ok && rest == "r" && strings.HasPrefix(tag, prefix) && nsTagPattern.MatchString(tag) {
			links = append(links, ifc.Name)
		}
	}
	err = removeNetns(ctx, names, "")
	for _, l := range links {
		err = errors.Join(err, delLink(ctx, l))
	}
	return append(names, links...), err
}

// nsParseRate reads a tc rate such as "100mbit" or "1gbit" into bits per
// second ("" is 0: unlimited).
func nsParseRate(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	m := regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)(bit|kbit|mbit|gbit)$`).FindStringSubmatch(strings.ToLower(s))
	if m == nil {
		return 0, fmt.Errorf("rate %q: want a number and bit, kbit, mbit or gbit, such as 100mbit", s)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	mult := map[string]float64{"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[m[2]]
	if v*mult < 8000 {
		return 0, fmt.Errorf("rate %q: below 8kbit", s)
	}
	return uint64(v * mult), nil
}
