//go:build linux

package testnet

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// inNetns runs f on an OS thread that has entered the network namespace
// whose file is nsPath (/run/netns/NAME). Sockets f creates stay in that
// namespace when used later from any thread. f runs on a goroutine of
// its own: should the thread fail to return to its namespace, it is
// left locked and dies with that goroutine instead of serving others.
func inNetns(nsPath string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: %w", err)
			return
		}
		defer orig.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: %w", err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: enter %s: %w", nsPath, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("netns: leave %s: %w", nsPath, err) // thread stays locked: see above
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// hasNetAdmin reports whether this process may configure networks: root
// with CAP_NET_ADMIN in its effective set (a container's root may lack
// it).
func hasNetAdmin() (bool, string) {
	if os.Geteuid() != 0 {
		return false, fmt.Sprintf("running as uid %d, not root", os.Geteuid())
	}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false, err.Error()
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return false, "unreadable CapEff"
			}
			if caps&(1<<unix.CAP_NET_ADMIN) == 0 || caps&(1<<unix.CAP_SYS_ADMIN) == 0 {
				return false, "root without CAP_NET_ADMIN and CAP_SYS_ADMIN"
			}
			return true, ""
		}
	}
	return false, "no CapEff in /proc/self/status"
}
