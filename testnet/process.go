package testnet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stratanet/strata/node/api"
)

// proc is one node of a run: its ports, data dir and logs stay the same
// across restarts (a rejoin reuses its identity and Raft state).
type proc struct {
	i       int
	spec    NodeSpec
	port    int // libp2p
	apiPort int
	dir     string // data dir
	out     string // stdout file (addresses)
	log     string // stderr file (the node's log)
	apiURL  string
	client  *api.Client // nil when the runner cannot reach the API

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the current process has exited
	exitErr error
	stopped bool      // the runner stopped it (or never started it)
	stopAt  time.Time // when the runner decided to stop it
	peerID  string
	addr    string // full multiaddr with /p2p/ID
	starts  int
	// startedAt[k] is when life k+1 (the k+1-th start) began: the
	// history checker's lower bound on its first operation.
	startedAt []time.Time
	paused    bool // SIGSTOPped by the runner, not yet resumed
}

// cluster starts and stops the node processes of one run.
type cluster struct {
	net  Network
	bin  string
	run  string // run directory
	args []string
	// fetchArgs replace args for nodes that fetch their layers.
	fetchArgs []string
	procs     []*proc
	// swarmRate is the scenario's replicated verify rate, given to every
	// node (the founder's is the one committed); nil: the default.
	swarmRate *float64
	// public: the swarm is joined by name through the DHT servers dhts
	// (addresses dhtAddrs); the founder names stewards.
	public   *PublicSpec
	dhts     []*proc
	dhtAddrs []string
	stewards []string
}

// freePort asks the kernel for an unused TCP port on 127.0.0.1. Both
// networks take the same numbers: a namespace has its own port space,
// and on loopback they must not clash.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// distinctPort returns a port from next that is not in used, and adds it:
// the kernel may hand out a port it just freed again, and two nodes of a
// run given the same number fail at start with "address already in use".
func distinctPort(used map[int]bool, next func() (int, error)) (int, error) {
	for range 100 {
		port, err := next()
		if err != nil {
			return 0, err
		}
		if !used[port] {
			used[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no port distinct from the run's others after 100 tries")
}

func newCluster(nw Network, bin, runDir string, modelArgs []string, nodes []NodeSpec) (*cluster, error) {
	c := &cluster{net: nw, bin: bin, run: runDir, args: modelArgs}
	used := map[int]bool{}
	for i, n := range nodes {
		p := &proc{i: i, spec: n, stopped: true, dir: filepath.Join(runDir, n.Name),
			out: filepath.Join(runDir, n.Name+".out"), log: filepath.Join(runDir, n.Name+".log")}
		var err error
		if p.port, err = distinctPort(used, freePort); err != nil {
			return nil, fmt.Errorf("port for %s: %w", n.Name, err)
		}
		if p.apiPort, err = distinctPort(used, freePort); err != nil {
			return nil, fmt.Errorf("API port for %s: %w", n.Name, err)
		}
		p.apiURL = nw.APIURL(i, p.apiPort)
		if p.apiURL != "" {
			if p.client, err = api.NewClient(p.apiURL); err != nil {
				return nil, fmt.Errorf("API of %s: %w", n.Name, err)
			}
		}
		c.procs = append(c.procs, p)
	}
	return c, nil
}

func (c *cluster) byName(name string) *proc {
	for _, p := range c.procs {
		if p.spec.Name == name {
			return p
		}
	}
	return nil
}

// bootstraps are the addresses of the running nodes other than p.
func (c *cluster) bootstraps(except *proc) []string {
	var out []string
	for _, p := range c.procs {
		if p == except {
			continue
		}
		p.mu.Lock()
		if !p.stopped && p.addr != "" {
			out = append(out, p.addr)
		}
		p.mu.Unlock()
	}
	return out
}

// start starts p's process, with the running nodes as bootstrap peers
// (none for the founder), and waits until it prints its address.
func (c *cluster) start(ctx context.Context, p *proc) error {
	listen := c.net.Listen(p.i, p.port)
	if q, ok := c.net.(interface{ ListenQUIC(i, port int) string }); ok {
		listen += "," + q.ListenQUIC(p.i, p.port)
	}
	args := []string{"node", "--data-dir", p.dir, "--listen", listen,
		"--api", c.net.APIBind(p.i, p.apiPort), "--log-peers", "0", "--max-layers", strconv.Itoa(p.spec.MaxLayers)}
	if p.spec.Fetch {
		args = append(args, c.fetchArgs...)
	} else {
		args = append(args, c.args...)
	}
	if p.spec.UploadRate != "" {
		args = append(args, "--upload-rate", p.spec.UploadRate)
	}
	if p.spec.GPU != "" {
		args = append(args, "--gpu", p.spec.GPU)
	}
	if p.spec.Region != "" {
		args = append(args, "--region", p.spec.Region)
	}
	if p.spec.Memory != "" {
		args = append(args, "--memory", p.spec.Memory)
	}
	if c.public != nil {
		args = append(args, c.publicArgs(p)...)
	} else if b := c.bootstraps(p); len(b) > 0 {
		args = append(args, "--bootstrap", strings.Join(b, ","))
	}
	if p.spec.Steal {
		args = append(args, "--steal")
	}
	if p.spec.Engine != "" {
		args = append(args, "--engine", p.spec.Engine)
	}
	if p.spec.Wire != "" {
		args = append(args, "--wire", p.spec.Wire)
	}
	if f := p.spec.FairAdmission; f != nil {
		args = append(args, "--fair-admission="+strconv.FormatBool(*f))
	}
	if r := p.spec.VerifyRate; r != nil {
		args = append(args, "--verify-rate", strconv.FormatFloat(*r, 'g', -1, 64))
	}
	if r := c.swarmRate; r != nil {
		args = append(args, "--swarm-verify-rate", strconv.FormatFloat(*r, 'g', -1, 64))
	}
	return c.launch(ctx, p, args)
}

// launch starts bin with args as p and waits until it prints its address.
func (c *cluster) launch(ctx context.Context, p *proc, args []string) error {
	// Append: a restart keeps the earlier run's output for the post-mortem.
	flags := os.O_CREATE | os.O_WRONLY | os.O_APPEND
	stdout, err := os.OpenFile(p.out, flags, 0o644)
	if err != nil {
		return err
	}
	defer stdout.Close()
	stderr, err := os.OpenFile(p.log, flags, 0o644)
	if err != nil {
		return err
	}
	defer stderr.Close()
	offset, _ := stdout.Seek(0, 2)
	fmt.Fprintf(stderr, "=== testnet: start %d: %s %s\n", p.starts+1, c.bin, strings.Join(args, " "))

	// The process outlives ctx only through stopAll: the runner's own
	// context is not the node's lifetime.
	cmd := c.net.Command(context.WithoutCancel(ctx), p.i, c.bin, args...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = stdout, stderr, nil
	if p.spec.Fault != "" {
		if cmd.Env == nil {
			cmd.Env = os.Environ()
		}
		cmd.Env = append(cmd.Env, faultEnv+"="+p.spec.Fault)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// Its own process group, so that a kill reaches any wrapper's child too.
	cmd.SysProcAttr.Setpgid = true
	orphanGuard(cmd.SysProcAttr)
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.spec.Name, err)
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.exited, p.exitErr, p.stopped, p.starts, p.paused = cmd, exited, nil, false, p.starts+1, false
	p.startedAt = append(p.startedAt, began)
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(exited)
	}()

	prefix := c.net.Listen(p.i, p.port) + "/p2p/"
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		id, addr := scanAddr(p.out, offset, prefix)
		if addr != "" {
			p.mu.Lock()
			p.peerID, p.addr = id, addr
			p.mu.Unlock()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return fmt.Errorf("node %s exited at start (%v); see %s", p.spec.Name, p.exitErr, p.log)
		case <-deadline:
			return fmt.Errorf("node %s printed no address on %s within 30s; see %s", p.spec.Name, prefix, p.log)
		case <-tick.C:
		}
	}
}

// scanAddr finds the peer ID and the listen address with prefix in what
// the node printed after offset.
func scanAddr(path string, offset int64, prefix string) (id, addr string) {
	f, err := os.Open(path)
	if err != nil {
		return "", ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, 0); err != nil {
		return "", ""
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if s, ok := strings.CutPrefix(line, "peer ID "); ok {
			id = strings.TrimSpace(s)
		}
		if s, ok := strings.CutPrefix(line, "listening on "); ok && strings.HasPrefix(s, prefix) && addr == "" {
			addr = strings.TrimSpace(s)
		}
	}
	if id == "" {
		return "", ""
	}
	return id, addr
}

// signal sends sig to p's process group and marks p stopped.
func (c *cluster) signal(p *proc, sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || p.cmd == nil {
		return fmt.Errorf("node %s is not running", p.spec.Name)
	}
	p.stopped, p.stopAt = true, time.Now()
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %s: %w", p.spec.Name, err)
	}
	return nil
}

// pause stops p's process group with SIGSTOP, or resumes it with
// SIGCONT; unlike signal, p stays running to the runner.
func (c *cluster) pause(p *proc, stop bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || p.cmd == nil {
		return fmt.Errorf("node %s is not running", p.spec.Name)
	}
	if p.paused == stop {
		return fmt.Errorf("node %s: paused is already %v", p.spec.Name, stop)
	}
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("%v %s: %w", sig, p.spec.Name, err)
	}
	p.paused = stop
	return nil
}

// waitExit waits for p's current process to end.
func (p *proc) waitExit(ctx context.Context) error {
	p.mu.Lock()
	ch := p.exited
	p.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// running reports whether the runner considers p up (started, not
// stopped by the runner).
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.stopped
}

// stoppedSince reports when the runner stopped p, if it did after t.
func (p *proc) stoppedAfter(t time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped && !p.stopAt.Before(t)
}

// crashed reports whether p exited although the runner did not stop it.
func (p *proc) crashed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// stopAll kills every process group this cluster started and waits for
// them: the end of a run, a failure or a signal.
func (c *cluster) stopAll() {
	all := append(slices.Clone(c.procs), c.dhts...)
	for _, p := range all {
		p.mu.Lock()
		if p.cmd != nil && p.cmd.Process != nil {
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) //nolint:errcheck // ESRCH: already gone
		}
		p.stopped = true
		p.mu.Unlock()
	}
	for _, p := range all {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		p.waitExit(ctx) //nolint:errcheck // a process SIGKILL cannot end is beyond help
		cancel()
	}
}

// waitReady waits until p's API says the committed map covers every layer.
func waitReady(ctx context.Context, p *proc) error {
	if p.client == nil {
		return fmt.Errorf("node %s: the runner cannot reach its API", p.spec.Name)
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	why := ""
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		w, err := p.client.NotReady(rctx)
		cancel()
		if err == nil && w == "" {
			return nil
		}
		if err == nil {
			why = w
		}
		if p.crashed() {
			return fmt.Errorf("node %s exited; see %s", p.spec.Name, p.log)
		}
		select {
		case <-ctx.Done():
			if why != "" {
				return fmt.Errorf("node %s not ready: %w (it said: %s)", p.spec.Name, ctx.Err(), why)
			}
			return fmt.Errorf("node %s not ready: %w", p.spec.Name, ctx.Err())
		case <-tick.C:
		}
	}
}

// swarmView reads p's view of the swarm (/v1/swarm).
func (p *proc) swarmView(ctx context.Context) (swarmView, error) {
	var v swarmView
	if p.client == nil {
		return v, fmt.Errorf("node %s: the runner cannot reach its API", p.spec.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := p.client.Swarm(ctx, &v)
	return v, err
}
