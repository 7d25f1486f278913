//go:build linux

package testnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// needNetAdmin skips t unless it may make namespaces.
func needNetAdmin(t *testing.T) {
	t.Helper()
	if ok, why := hasNetAdmin(); !ok {
		t.Skipf("namespace network tests need root with CAP_NET_ADMIN (%s); run: sudo go test ./testnet -run Netns", why)
	}
	for _, tool := range []string{"ip", "tc", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("namespace network tests need %s (apt-get install -y iproute2 iptables)", tool)
		}
	}
}

// nsListen listens on addr inside namespace ns.
func nsListen(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	err := inNetns("/run/netns/"+ns, func() (err error) {
		ln, err = net.Listen("tcp4", addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen %s in %s: %v", addr, ns, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// nsDial dials addr from namespace ns.
func nsDial(ns, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := inNetns("/run/netns/"+ns, func() (err error) {
		c, err = net.DialTimeout("tcp4", addr, timeout)
		return err
	})
	return c, err
}

// nsServe accepts connections until ln closes: it drains each and sends
// the count of bytes read back, and reports each peer's address.
func nsServe(ln net.Listener, peers chan<- string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		select {
		case peers <- c.RemoteAddr().String():
		default:
		}
		go func() {
			defer c.Close()
			n, _ := io.Copy(io.Discard, c)
			fmt.Fprintf(c, "%d\n", n)
		}()
	}
}

// connectRTT is the median time of five TCP connects: one SYN / SYN-ACK
// round trip each.
func connectRTT(t *testing.T, ns, addr string) time.Duration {
	t.Helper()
	var rtts []time.Duration
	for range 5 {
		start := time.Now()
		c, err := nsDial(ns, addr, 3*time.Second)
		if err != nil {
			t.Fatalf("dial %s from %s: %v", addr, ns, err)
		}
		rtts = append(rtts, time.Since(start))
		c.Close()
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2]
}

func TestNetnsLinks(t *testing.T) {
	needNetAdmin(t)
	tag := fmt.Sprintf("stt%d", os.Getpid()%1000)
	spec := NetworkSpec{
		Mode: ModeNamespaces,
		Regions: []RegionSpec{
			{Name: "eu", RTT: 20 * time.Millisecond},
			{Name: "asia", RTT: 10 * time.Millisecond},
		},
		Links: []LinkSpec{{Between: [2]string{"eu", "asia"}, RTT: 80 * time.Millisecond}},
	}
	nw, err := newNamespaces(spec, WithNamespaceTag(tag), WithNamespaceLog(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			nw.Close()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	if err := nw.Setup(ctx, []Placement{
		{Name: "n1", Region: "eu"},
		{Name: "n2", Region: "eu", Rate: "20mbit"},
		{Name: "n3", Region: "asia", NAT: NATEIM},
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("setup of 3 nodes (one behind NAT) took %v", time.Since(start).Round(time.Millisecond))
	ns := func(i int) string { return nw.Namespace(i) }
	at := func(i, port int) string { return fmt.Sprintf("%s:%d", nw.Addr(i), port) }

	peers := make(chan string, 16)
	go nsServe(nsListen(t, ns(0), at(0, 7000)), peers)
	go nsServe(nsListen(t, ns(1), at(1, 7000)), nil)
	// The NAT node listens on its own (private) address.
	go nsServe(nsListen(t, ns(2), "192.168.100.2:7000"), nil)

	// Round trips, configured against measured.
	for _, c := range []struct {
		from, to int
		want     time.Duration
	}{{1, 0, 20 * time.Millisecond}, {2, 0, 80 * time.Millisecond}, {2, 1, 80 * time.Millisecond}} {
		got := connectRTT(t, ns(c.from), at(c.to, 7000))
		tol := c.want*3/10 + 3*time.Millisecond
		t.Logf("RTT n%d->n%d: configured %v, measured %v", c.from+1, c.to+1, c.want, got.Round(100*time.Microsecond))
		if got < c.want-tol || got > c.want+tol {
			t.Errorf("RTT n%d->n%d %v, want %v ± %v", c.from+1, c.to+1, got, c.want, tol)
		}
	}
	q, dropped, acc := nw.DelayStats()
	t.Logf("delayer: %d packets queued, %d dropped, %d released", q, dropped, acc)
	if q == 0 {
		t.Error("the delayer saw no packets")
	}

	// The NAT node's connections arrive from its gateway's address.
	drain := func() {
		for {
			select {
			case <-peers:
			default:
				return
			}
		}
	}
	drain()
	c, err := nsDial(ns(2), at(0, 7000), 3*time.Second)
	if err != nil {
		t.Fatalf("NAT node cannot dial out: %v", err)
	}
	c.Close()
	if p := <-peers; !strings.HasPrefix(p, nw.Addr(2).String()+":") {
		t.Errorf("NAT node's connection came from %s, want its gateway %s", p, nw.Addr(2))
	}
	// ... and nobody dials in: not at the gateway's address, not at the
	// private one.
	for _, addr := range []string{at(2, 7000), "192.168.100.2:7000"} {
		if c, err := nsDial(ns(0), addr, 700*time.Millisecond); err == nil {
			c.Close()
			t.Errorf("n1 dialled the NAT node at %s", addr)
		}
	}

	// Access rate: n2 uploads at 20 Mbit/s.
	rate := nsUpload(t, ns(1), at(0, 7000), time.Second)
	t.Logf("rate n2->n1: configured 20 Mbit/s, measured %.1f Mbit/s", rate/1e6)
	if rate < 10e6 || rate > 24e6 {
		t.Errorf("n2's upload %.1f Mbit/s, want about 20", rate/1e6)
	}

	// The runner reaches every API from the root namespace, the NAT
	// node's through its gateway.
	for _, i := range []int{0, 2} {
		ln := nsListen(t, ns(i), nw.APIBind(i, 7001))
		go nsServe(ln, nil)
		host := strings.TrimPrefix(nw.APIURL(i, 7001), "http://")
		c, err := net.DialTimeout("tcp4", host, 3*time.Second)
		if err != nil {
			t.Errorf("API of n%d at %s unreachable from the root namespace: %v", i+1, host, err)
			continue
		}
		c.Close()
	}

	// Command runs inside the node's namespace.
	out, err := nw.Command(ctx, 0, "ip", "-4", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), nw.Addr(0).String()+"/") {
		t.Errorf("Command in n1: %v: %s", err, out)
	}

	// Partition n1 from {n2, n3}, then heal.
	if err := nw.Partition([][]int{{0}, {1, 2}}); err != nil {
		t.Fatal(err)
	}
	if c, err := nsDial(ns(1), at(0, 7000), 500*time.Millisecond); err == nil {
		c.Close()
		t.Error("n2 reached n1 across the partition")
	}
	if c, err := nsDial(ns(2), at(1, 7000), 3*time.Second); err != nil {
		t.Errorf("n3 cannot reach n2 on its side of the partition: %v", err)
	} else {
		c.Close()
	}
	if err := nw.Heal(); err != nil {
		t.Fatal(err)
	}
	if c, err := nsDial(ns(1), at(0, 7000), 3*time.Second); err != nil {
		t.Errorf("n2 cannot reach n1 after Heal: %v", err)
	} else {
		c.Close()
	}

	// Close leaves nothing behind, and a second Close is a no-op.
	closed = true
	if err := errors.Join(nw.Close(), nw.Close()); err != nil {
		t.Fatal(err)
	}
	assertNoLeftovers(t, tag)
}

// nsUpload sends from ns to addr for d and returns the rate the receiver
// counted, in bits per second.
func nsUpload(t *testing.T, ns, addr string, d time.Duration) float64 {
	t.Helper()
	c, err := nsDial(ns, addr, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 64<<10)
	start := time.Now()
	c.SetWriteDeadline(start.Add(d))
	for {
		if _, err := c.Write(buf); err != nil {
			break
		}
	}
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var n int64
	if _, err := fmt.Fscan(c, &n); err != nil {
		t.Fatalf("reading the receiver's count: %v", err)
	}
	return float64(n*8) / time.Since(start).Seconds()
}

// assertNoLeftovers fails if a namespace or root link of tag exists.
func assertNoLeftovers(t *testing.T, tag string) {
	t.Helper()
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tag+"-") {
			t.Errorf("namespace %s left behind", e.Name())
		}
	}
	if _, err := net.InterfaceByName(tag + "-r"); err == nil {
		t.Errorf("root link %s-r left behind", tag)
	}
}

func TestNetnsCleanLeftovers(t *testing.T) {
	needNetAdmin(t)
	tag := fmt.Sprintf("stc%d", os.Getpid()%1000)
	spec := NetworkSpec{Regions: []RegionSpec{{Name: "eu"}}}
	nw, err := newNamespaces(spec, WithNamespaceTag(tag))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := nw.Setup(ctx, []Placement{{Name: "a", Region: "eu"}, {Name: "b", Region: "eu", NAT: NATEIM}}); err != nil {
		nw.Close()
		t.Fatal(err)
	}
	// A run that dies without Close: its delayer goes with the process,
	// its namespaces stay until CleanNamespaces.
	nw.delayer.Close()
	removed, err := CleanNamespaces(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("removed %v", removed)
	if len(removed) != 5 { // hub, n1, g2, n2, root link
		t.Errorf("removed %d things, want 5: %v", len(removed), removed)
	}
	assertNoLeftovers(t, tag)
	if err := nw.Close(); err != nil {
		t.Errorf("Close after the leftovers were cleaned: %v", err)
	}
}

func TestNetnsSetupErrorCleansUp(t *testing.T) {
	needNetAdmin(t)
	tag := fmt.Sprintf("ste%d", os.Getpid()%1000)
	spec := NetworkSpec{Regions: []RegionSpec{{Name: "eu"}}}
	if _, err := newNamespaces(spec, WithNamespaceTag(tag)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A tag too long for the root veth's name (15 bytes at most): Setup
	// fails after it made the hub, and must remove it.
	long := tag + "abcdefghijk"
	nw1, _ := newNamespaces(spec, WithNamespaceTag(long))
	if err := nw1.Setup(ctx, []Placement{{Name: "a", Region: "eu"}}); err == nil {
		nw1.Close()
		t.Fatal("Setup made a root link named " + long + "-r")
	} else {
		t.Logf("Setup failed as it should: %v", err)
	}
	assertNoLeftovers(t, long)

	nw2, _ := newNamespaces(spec, WithNamespaceTag(tag))
	if err := nw2.Setup(ctx, []Placement{{Name: "a", Region: "eu"}, {Name: "b", Region: "eu"}, {Name: "c", Region: "eu", NAT: NATEIM}}); err != nil {
		nw2.Close()
		t.Fatal(err)
	}
	// A second network with the same tag fails at its hub, and must not
	// remove the first's namespaces.
	nw3, _ := newNamespaces(spec, WithNamespaceTag(tag))
	if err := nw3.Setup(ctx, []Placement{{Name: "a", Region: "eu"}}); err == nil {
		t.Error("a second network took a tag in use")
	}
	if _, err := os.Stat("/run/netns/" + tag + "-n3"); err != nil {
		t.Errorf("the failed Setup removed another network's namespace: %v", err)
	}
	if err := nw2.Close(); err != nil {
		t.Fatal(err)
	}
	assertNoLeftovers(t, tag)
}

// TestNetnsSwarmNAT starts three real `strata node` processes, one behind
// NAT, and checks that the NAT node joins. It builds the binary, so it
// runs only with STRATA_NETNS_NODES=1.
func TestNetnsSwarmNAT(t *testing.T) {
	needNetAdmin(t)
	if os.Getenv("STRATA_NETNS_NODES") == "" {
		t.Skip("set STRATA_NETNS_NODES=1 to run three strata nodes in namespaces (builds the binary; about a minute)")
	}
	dir := t.TempDir()
	bin := dir + "/strata"
	build := exec.Command("go", "build", "-o", bin, "../cmd/strata")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	spec := NetworkSpec{
		Mode: ModeNamespaces,
		Regions: []RegionSpec{
			{Name: "eu", RTT: 20 * time.Millisecond, Rate: "1gbit"},
			{Name: "us", RTT: 20 * time.Millisecond, Rate: "100mbit"},
		},
		Links: []LinkSpec{{Between: [2]string{"eu", "us"}, RTT: 80 * time.Millisecond, Jitter: 4 * time.Millisecond, Loss: 0.001}},
	}
	nw, err := newNamespaces(spec, WithNamespaceLog(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nw.Close(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := nw.Setup(ctx, []Placement{{Name: "n1", Region: "eu"}, {Name: "n2", Region: "us"}, {Name: "n3", Region: "us", NAT: NATEIM}}); err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	t.Cleanup(func() {
		for _, c := range cmds {
			c.Process.Signal(os.Interrupt)
		}
		for _, c := range cmds {
			done := make(chan struct{})
			go func() { c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				c.Process.Kill()
			}
		}
	})
	start := func(i int, boot string) {
		args := []string{"node", "--data-dir", fmt.Sprintf("%s/n%d", dir, i+1), "--listen", nw.Listen(i, 4001),
			"--api", nw.APIBind(i, 5001), "--sim-model", "llama-3-8b", "--gpu", "rtx4090", "--max-layers", "16", "--log-peers", "0"}
		if boot != "" {
			args = append(args, "--bootstrap", boot)
		}
		c := nw.Command(context.WithoutCancel(ctx), i, bin, args...)
		logf, err := os.Create(fmt.Sprintf("%s/n%d.log", dir, i+1))
		if err != nil {
			t.Fatal(err)
		}
		c.Stdout, c.Stderr = logf, logf
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
		t.Cleanup(func() {
			if t.Failed() {
				b, _ := os.ReadFile(logf.Name())
				t.Logf("n%d's log:\n%s", i+1, nsTail(string(b), 40))
			}
		})
	}
	t0 := time.Now()
	start(0, "")
	want := fmt.Sprintf("/ip4/%s/tcp/4001/p2p/", nw.Addr(0))
	var boot string
	for boot == "" && time.Since(t0) < 30*time.Second {
		b, _ := os.ReadFile(dir + "/n1.log")
		boot = regexp.MustCompile(regexp.QuoteMeta(want) + `[A-Za-z0-9]+`).FindString(string(b))
		time.Sleep(100 * time.Millisecond)
	}
	if boot == "" {
		t.Fatal("n1 printed no address")
	}
	t.Logf("founder n1: %s", boot)
	t1 := time.Now()
	// n3 (behind NAT) first; n2 joins while the direct path between n2
	// and n3 is cut, so that n2 can reach n3 only through a relay (n1).
	start(2, boot)
	if err := nw.Partition([][]int{{1}, {2}}); err != nil {
		t.Fatal(err)
	}
	start(1, boot)

	type member struct {
		ID        string `json:"id"`
		Member    bool   `json:"member"`
		Connected bool   `json:"connected"`
		Relayed   bool   `json:"relayed"`
		RTTMs     float64
	}
	view := func(i int) (node string, ms []member, err error) {
		var v struct {
			Node    string   `json:"node"`
			Members []member `json:"members"`
		}
		err = nsGetJSON(ctx, nw.APIURL(i, 5001)+"/v1/swarm", &v)
		return v.Node, v.Members, err
	}
	var natID string
	var joined time.Duration
	for time.Since(t1) < 90*time.Second {
		if natID == "" {
			natID, _, _ = view(2) // through the gateway's API forward
		}
		if natID != "" {
			_, ms, _ := view(0)
			for _, m := range ms {
				if m.ID == natID && m.Member && m.Connected {
					if joined == 0 {
						joined = time.Since(t1)
						t.Logf("NAT node %s joined after %v: in n1's view connected, relayed=%v", natID, joined.Round(time.Millisecond), m.Relayed)
					}
				}
			}
		}
		if joined != 0 {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if joined == 0 {
		t.Fatalf("NAT node (%q) did not join within 90 s", natID)
	}
	// n2's view of n3: while the direct path is cut, only a relayed
	// link is possible; after Heal, DCUtR may upgrade it.
	n2view := func() (connected, relayed, seen bool) {
		_, ms, err := view(1)
		if err != nil {
			return false, false, false
		}
		for _, m := range ms {
			if m.ID == natID {
				return m.Connected, m.Relayed, true
			}
		}
		return false, false, false
	}
	var viaRelay bool
	for wait := time.Now().Add(45 * time.Second); time.Now().Before(wait); time.Sleep(500 * time.Millisecond) {
		conn, rel, _ := n2view()
		if conn && !rel {
			t.Errorf("n2 has a direct link to n3 across the cut")
			break
		}
		if conn && rel {
			viaRelay = true
			t.Logf("n2 reaches n3 through a relay after %v", time.Since(t1).Round(time.Millisecond))
			break
		}
	}
	if !viaRelay {
		t.Logf("n2 made no link to n3 within 45 s while the direct path was cut (nothing needed one)")
	}
	if err := nw.Heal(); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	for wait := healed.Add(30 * time.Second); time.Now().Before(wait); time.Sleep(500 * time.Millisecond) {
		if conn, rel, _ := n2view(); conn && !rel {
			t.Logf("after Heal, n2 and n3 are directly connected after %v (DCUtR or a direct dial from n3)", time.Since(healed).Round(time.Millisecond))
			break
		}
	}
	conn, rel, seen := n2view()
	t.Logf("finally n2 sees n3: seen=%v connected=%v relayed=%v", seen, conn, rel)
	b, _ := os.ReadFile(dir + "/n3.log")
	for _, line := range strings.Split(string(b), "\n") {
		if l := strings.ToLower(line); strings.Contains(l, "relay") || strings.Contains(l, "hole") || strings.Contains(l, "punch") {
			t.Logf("n3: %s", line)
		}
	}
	q, dropped, acc := nw.DelayStats()
	t.Logf("delayer: %d packets queued, %d dropped, %d released", q, dropped, acc)
}

func nsTail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func nsGetJSON(ctx context.Context, url string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// TestNetnsNATKinds checks that each gateway maps as its kind is named:
// an eim gateway sends one internal endpoint out on the same external
// port to every destination (the source port, kept), a symmetric one on
// a different port per destination. UDP from one socket, and TCP from
// one local port (SO_REUSEPORT), to four destinations on two nodes.
func TestNetnsNATKinds(t *testing.T) {
	needNetAdmin(t)
	nw, err := newNamespaces(NetworkSpec{Regions: []RegionSpec{{Name: "eu"}}}, WithNamespaceLog(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nw.Close(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := nw.Setup(ctx, []Placement{{Name: "p1", Region: "eu"}, {Name: "p2", Region: "eu"},
		{Name: "eim", Region: "eu", NAT: NATEIM}, {Name: "sym", Region: "eu", NAT: NATSymmetric}}); err != nil {
		t.Fatal(err)
	}
	bad, err := newNamespaces(NetworkSpec{Regions: []RegionSpec{{Name: "eu"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Setup(ctx, []Placement{{Name: "x", Region: "eu", NAT: "full-cone"}}); err == nil {
		t.Error("Setup accepted NAT kind full-cone")
	}
	bad.Close()
	// Four destinations: ports 7100 and 7101 on p1 and p2. Each server
	// reports the source address it saw.
	seen := make(chan string, 64)
	var dests []string
	for i := range 2 {
		for _, port := range []int{7100, 7101} {
			addr := fmt.Sprintf("%s:%d", nw.Addr(i), port)
			dests = append(dests, addr)
			var pc net.PacketConn
			if err := inNetns("/run/netns/"+nw.Namespace(i), func() (err error) {
				pc, err = net.ListenPacket("udp4", addr)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pc.Close() })
			go func() {
				buf := make([]byte, 64)
				for {
					_, from, err := pc.ReadFrom(buf)
					if err != nil {
						return
					}
					seen <- "udp " + from.String()
				}
			}()
			go nsServe(nsListen(t, nw.Namespace(i), addr), seen)
		}
	}
	const localPort = 7300
	for _, c := range []struct {
		i    int
		kind NATKind
	}{{2, NATEIM}, {3, NATSymmetric}} {
		ns, gw := nw.Namespace(c.i), nw.Addr(c.i).String()
		for _, network := range []string{"udp", "tcp"} {
			var ports []string
			for _, d := range dests {
				if err := natProbe(ns, network, localPort, d); err != nil {
					t.Fatalf("%s probe from %s to %s: %v", network, c.kind, d, err)
				}
				var from string
				select {
				case from = <-seen:
				case <-ctx.Done():
					t.Fatalf("%s probe from %s to %s never arrived", network, c.kind, d)
				}
				host, port, _ := net.SplitHostPort(strings.TrimPrefix(from, "udp "))
				if host != gw {
					t.Errorf("%s probe from %s arrived from %s, want the gateway %s", network, c.kind, from, gw)
				}
				ports = append(ports, port)
			}
			distinct := len(slices.Compact(slices.Sorted(slices.Values(ports))))
			t.Logf("%s NAT, %s from local port %d to 4 destinations: external ports %v", c.kind, network, localPort, ports)
			switch c.kind {
			case NATEIM:
				if distinct != 1 || ports[0] != strconv.Itoa(localPort) {
					t.Errorf("eim NAT mapped %s port %d to %v, want %d for every destination", network, localPort, ports, localPort)
				}
			case NATSymmetric:
				if distinct < 2 {
					t.Errorf("symmetric NAT mapped %s port %d to %v for 4 destinations, want different ports", network, localPort, ports)
				}
			}
		}
	}
}

// natProbe sends one UDP datagram, or makes one TCP connection, from
// local port lport in namespace ns to addr. The TCP socket sets
// SO_REUSEPORT so that the same local port can connect again at once.
func natProbe(ns, network string, lport int, addr string) error {
	d := net.Dialer{Timeout: 3 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = errors.Join(syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1),
				syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, unix.SO_REUSEPORT, 1))
		})
		return errors.Join(err, serr)
	}}
	if network == "udp" {
		d.LocalAddr = &net.UDPAddr{Port: lport}
	} else {
		d.LocalAddr = &net.TCPAddr{Port: lport}
	}
	var c net.Conn
	if err := inNetns("/run/netns/"+ns, func() (err error) {
		c, err = d.Dial(network+"4", addr)
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	if network == "udp" {
		_, err := c.Write([]byte("probe"))
		return err
	}
	return nil
}
