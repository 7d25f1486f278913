package api

import (
	"net"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Default connection limits: a connection costs the server about 10 KiB
// (its goroutine and read buffer) until its header timeout, so these
// bound what idle or slowloris connections can hold to tens of MiB.
const (
	DefaultMaxConns      = 8192
	DefaultMaxConnsPerIP = 1024
)

// limitListener closes, as soon as it accepts them, connections beyond
// max open in all or beyond perIP open from one address. It refuses
// rather than waits: a listener that stopped accepting would let one
// client's idle connections keep everyone else waiting.
type limitListener struct {
	net.Listener
	max, perIP int
	refused    prometheus.Counter

	mu   sync.Mutex
	open int
	byIP map[string]int
}

func newLimitListener(ln net.Listener, max, perIP int, refused prometheus.Counter) *limitListener {
	return &limitListener{Listener: ln, max: max, perIP: perIP, refused: refused, byIP: map[string]int{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		l.mu.Lock()
		ok := l.open < l.max && l.byIP[ip] < l.perIP
		if ok {
			l.open++
			l.byIP[ip]++
		}
		l.mu.Unlock()
		if ok {
			return &limitedConn{Conn: c, l: l, ip: ip}, nil
		}
		l.refused.Inc()
		c.Close()
	}
}

func (l *limitListener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
}

func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return c.RemoteAddr().String()
}

// limitedConn gives its slot back once, on its first Close.
type limitedConn struct {
	net.Conn
	l    *limitListener
	ip   string
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}

// CloseWrite lets net/http half-close the connection as it does a bare
// TCP connection's.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
