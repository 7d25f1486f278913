//go:build linux

package testnet

import (
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The delayer: a userspace stand-in for tc netem, which many kernels
// (Firecracker's among them) lack. An iptables NFQUEUE rule in the hub
// namespace hands every packet between two node addresses to a netlink
// queue; the delayer reads the first bytes of each (its IPv4 header),
// decides with pathModel, and gives the kernel the verdict ACCEPT once
// the packet's delay has passed, or DROP at once. The kernel holds the
// packets meanwhile, so nothing is copied back.
//
// It runs inside the runner's process: only the netlink socket has to
// live in the hub namespace, and a socket stays in the namespace it was
// created in whatever thread later uses it, so no helper process (and no
// helper binary to find or build) is needed.
//
// The netlink messages are written by hand from linux/netfilter/
// nfnetlink_queue.h: the protocol is small and stable, and the Go
// NFQUEUE libraries are not on this project's module proxy.

const (
	nfnlSubsysQueue = 3
	nfqnlMsgPacket  = 0
	nfqnlMsgVerdict = 1
	nfqnlMsgConfig  = 2

	nfqaPacketHdr  = 1
	nfqaVerdictHdr = 2
	nfqaPayload    = 10

	nfqaCfgCmd         = 1
	nfqaCfgParams      = 2
	nfqaCfgQueueMaxlen = 3
	nfqaCfgMask        = 4
	nfqaCfgFlags       = 5

	nfqnlCfgCmdBind   = 1
	nfqnlCopyPacket   = 2
	nfqaCfgFlagGSO    = 4 // hand GSO packets over whole: one verdict per super-packet
	nfDrop            = 0
	nfAccept          = 1
	nfqueueHeaderCopy = 20 // an IPv4 header without options: the addresses are all we need
	nfqueueMaxLen     = 32768
)

// delayStats counts what the delayer did, for logs and tests.
type delayStats struct {
	Queued, Dropped, Accepted, RecvErrors atomic.Int64
}

// delayer owns one NFQUEUE queue in one namespace.
type delayer struct {
	fd     int
	queue  uint16
	model  pathModel
	region map[netip.Addr]string // a node address's region
	stats  delayStats

	mu   sync.Mutex
	rnd  *rand.Rand
	held heldQueue
	last map[[2]netip.Addr]time.Time // per host pair: when its latest packet leaves
	// extra degrades one host's packets, both ways (a nemesis fault).
	extra map[netip.Addr]pathSpec
	seq   uint64
	wake  chan struct{}
	nlSeq atomic.Uint32

	cancel context.CancelFunc
	done   sync.WaitGroup
	once   sync.Once
}

// startDelayer binds queue in the namespace whose file is nsPath and
// starts releasing its packets. seed makes the drops and jitter of a run
// repeatable.
func startDelayer(nsPath string, queue uint16, model pathModel, region map[netip.Addr]string, seed uint64) (*delayer, error) {
	var fd int
	err := inNetns(nsPath, func() error {
		var err error
		fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("delayer: netlink socket in %s: %w", nsPath, err)
	}
	d := &delayer{fd: fd, queue: queue, model: model, region: region,
		rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), last: map[[2]netip.Addr]time.Time{},
		wake: make(chan struct{}, 1)}
	if err := d.configure(); err != nil {
		unix.Close(fd)
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	d.done.Add(2)
	go d.read(ctx)
	go d.release(ctx)
	return d, nil
}

func (d *delayer) configure() error {
	if err := unix.Bind(d.fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("delayer: bind netlink: %w", err)
	}
	// A deep receive buffer: at 1 Gbit/s and 75 ms one way, thousands of
	// packets are in flight, and each is one message to read.
	_ = unix.SetsockoptInt(d.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
	_ = unix.SetsockoptInt(d.fd, unix.SOL_NETLINK, unix.NETLINK_NO_ENOBUFS, 1)
	// Reads time out so that the reader sees Close.
	tv := unix.NsecToTimeval((200 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(d.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("delayer: SO_RCVTIMEO: %w", err)
	}
	cmd := []byte{nfqnlCfgCmdBind, 0, 0, unix.AF_INET}
	params := binary.BigEndian.AppendUint32(nil, nfqueueHeaderCopy)
	params = append(params, nfqnlCopyPacket)
	maxlen := binary.BigEndian.AppendUint32(nil, nfqueueMaxLen)
	flags := binary.BigEndian.AppendUint32(nil, nfqaCfgFlagGSO)
	steps := []struct {
		what  string
		attrs [][]byte
	}{
		{"bind queue", [][]byte{nlAttr(nfqaCfgCmd, cmd)}},
		{"copy mode", [][]byte{nlAttr(nfqaCfgParams, params)}},
		{"queue length", [][]byte{nlAttr(nfqaCfgQueueMaxlen, maxlen)}},
		{"flags", [][]byte{nlAttr(nfqaCfgFlags, flags), nlAttr(nfqaCfgMask, flags)}},
	}
	for _, s := range steps {
		if err := d.request(nfqnlMsgConfig, s.attrs, true); err != nil {
			return fmt.Errorf("delayer: queue %d: %s: %w", d.queue, s.what, err)
		}
	}
	return nil
}

// request sends one nfnetlink queue message; with ack it waits for the
// kernel's answer.
func (d *delayer) request(msg uint16, attrs [][]byte, ack bool) error {
	seq := d.nlSeq.Add(1)
	flags := uint16(unix.NLM_F_REQUEST)
	if ack {
		flags |= unix.NLM_F_ACK
	}
	b := make([]byte, unix.NLMSG_HDRLEN, 64)
	binary.NativeEndian.PutUint16(b[4:], nfnlSubsysQueue<<8|msg)
	binary.NativeEndian.PutUint16(b[6:], flags)
	binary.NativeEndian.PutUint32(b[8:], seq)
	// nfgenmsg: family, version, resource id (the queue) in network order.
	b = append(b, unix.AF_UNSPEC, unix.NFNETLINK_V0)
	b = binary.BigEndian.AppendUint16(b, d.queue)
	for _, a := range attrs {
		b = append(b, a...)
	}
	binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
	if err := unix.Sendto(d.fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	if !ack {
		return nil
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(d.fd, buf, 0)
		if err != nil {
			return fmt.Errorf("waiting for the ack: %w", err)
		}
		for m := buf[:n]; len(m) >= unix.NLMSG_HDRLEN; {
			l := int(binary.NativeEndian.Uint32(m))
			if l < unix.NLMSG_HDRLEN || l > len(m) {
				break
			}
			if binary.NativeEndian.Uint16(m[4:]) == unix.NLMSG_ERROR && binary.NativeEndian.Uint32(m[8:]) == seq && l >= 20 {
				if errno := int32(binary.NativeEndian.Uint32(m[16:])); errno != 0 {
					return unix.Errno(-errno)
				}
				return nil
			}
			m = m[nlAlign(l):]
		}
	}
}

func nlAlign(n int) int { return (n + 3) &^ 3 }

func nlAttr(typ uint16, data []byte) []byte {
	b := make([]byte, 4, nlAlign(4+len(data)))
	binary.NativeEndian.PutUint16(b, uint16(4+len(data)))
	binary.NativeEndian.PutUint16(b[2:], typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func (d *delayer) verdict(id uint32, v uint32) {
	hdr := binary.BigEndian.AppendUint32(nil, v)
	hdr = binary.BigEndian.AppendUint32(hdr, id)
	// A failed verdict leaves the packet to the kernel, which drops it
	// when the queue is unbound at Close: a lost packet, as on a WAN.
	_ = d.request(nfqnlMsgVerdict, [][]byte{nlAttr(nfqaVerdictHdr, hdr)}, false)
}

// read takes packets off the queue and drops or schedules each.
func (d *delayer) read(ctx context.Context) {
	defer d.done.Done()
	buf := make([]byte, 1<<16)
	for ctx.Err() == nil {
		n, _, err := unix.Recvfrom(d.fd, buf, 0)
		if err != nil {
			if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
				d.stats.RecvErrors.Add(1)
			}
			continue
		}
		now := time.Now()
		for m := buf[:n]; len(m) >= unix.NLMSG_HDRLEN; {
			l := int(binary.NativeEndian.Uint32(m))
			if l < unix.NLMSG_HDRLEN || l > len(m) {
				break
			}
			if binary.NativeEndian.Uint16(m[4:]) == nfnlSubsysQueue<<8|nfqnlMsgPacket {
				d.packet(now, m[unix.NLMSG_HDRLEN+4:l])
			}
			m = m[nlAlign(l):]
		}
	}
}

// packet handles one queued packet's attributes.
func (d *delayer) packet(now time.Time, attrs []byte) {
	var id uint32
	var haveID bool
	var payload []byte
	for len(attrs) >= 4 {
		l := int(binary.NativeEndian.Uint16(attrs))
		typ := binary.NativeEndian.Uint16(attrs[2:]) & 0x3fff
		if l < 4 || l > len(attrs) {
			break
		}
		switch typ {
		case nfqaPacketHdr:
			if l >= 8 {
				id, haveID = binary.BigEndian.Uint32(attrs[4:]), true
			}
		case nfqaPayload:
			payload = attrs[4:l]
		}
		attrs = attrs[min(nlAlign(l), len(attrs)):]
	}
	if !haveID {
		return
	}
	d.stats.Queued.Add(1)
	if len(payload) < 20 || payload[0]>>4 != 4 {
		d.verdict(id, nfAccept)
		return
	}
	src, _ := netip.AddrFromSlice(payload[12:16])
	dst, _ := netip.AddrFromSlice(payload[16:20])
	d.mu.Lock()
	delay, drop := d.model.decide(d.region[src], d.region[dst], d.rnd)
	for _, a := range [2]netip.Addr{src, dst} {
		if x, ok := d.extra[a]; ok && !drop {
			if x.Loss > 0 && d.rnd.Float64() < x.Loss {
				drop = true
			}
			delay += x.OneWay
		}
	}
	if drop {
		d.mu.Unlock()
		d.stats.Dropped.Add(1)
		d.verdict(id, nfDrop)
		return
	}
	pair := [2]netip.Addr{src, dst}
	at := delayReleaseAt(now, delay, d.last[pair])
	d.last[pair] = at
	d.seq++
	heap.Push(&d.held, heldPacket{at: at, seq: d.seq, id: id})
	first := d.held[0].seq == d.seq
	d.mu.Unlock()
	if first {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// release gives the verdicts of held packets as they fall due.
func (d *delayer) release(ctx context.Context) {
	defer d.done.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		d.mu.Lock()
		now := time.Now()
		var due []uint32
		for len(d.held) > 0 && !d.held[0].at.After(now) {
			due = append(due, heap.Pop(&d.held).(heldPacket).id)
		}
		wait := time.Hour
		if len(d.held) > 0 {
			wait = d.held[0].at.Sub(now)
		}
		d.mu.Unlock()
		for _, id := range due {
			d.verdict(id, nfAccept)
		}
		d.stats.Accepted.Add(int64(len(due)))
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		case <-t.C:
		}
	}
}

// Close stops the delayer and unbinds its queue: packets it still held
// are dropped by the kernel, and later ones pass undelayed
// (--queue-bypass) until the rule goes with its namespace.
func (d *delayer) Close() error {
	if d == nil {
		return nil
	}
	d.once.Do(func() {
		d.cancel()
		d.done.Wait()
		unix.Close(d.fd)
	})
	return nil
}

type heldPacket struct {
	at  time.Time
	seq uint64 // arrival order breaks ties, so equal delays keep order
	id  uint32
}

type heldQueue []heldPacket

func (p heldQueue) Len() int { return len(p) }
func (p heldQueue) Less(i, j int) bool {
	if !p[i].at.Equal(p[j].at) {
		return p[i].at.Before(p[j].at)
	}
	return p[i].seq < p[j].seq
}
func (p heldQueue) Swap(i, j int) { p[i], p[j] = p[j], p[i] }
func (p *heldQueue) Push(x any)   { *p = append(*p, x.(heldPacket)) }
func (p *heldQueue) Pop() any {
	old := *p
	x := old[len(old)-1]
	*p = old[:len(old)-1]
	return x
}

// degrade adds delay and loss to every packet from or to addr (a zero
// spec undoes it).
func (d *delayer) degrade(addr netip.Addr, p pathSpec) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p == (pathSpec{}) {
		delete(d.extra, addr)
		return
	}
	if d.extra == nil {
		d.extra = map[netip.Addr]pathSpec{}
	}
	d.extra[addr] = p
}
