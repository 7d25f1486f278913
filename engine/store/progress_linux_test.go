package store

import (
	"bytes"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// NewProgress draws a bar on a terminal (a pseudo-terminal here) and plain
// lines on a pipe.
func TestNewProgressDetectsTTY(t *testing.T) {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Skipf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Skipf("ptsname: %v", err)
	}
	pts, err := os.OpenFile("/dev/pts/"+itoa(int(n)), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("open pts: %v", err)
	}
	defer pts.Close()
	if p, ok := NewProgress(pts).(*textProgress); !ok || !p.tty {
		t.Errorf("a terminal gets %#v, want a bar", NewProgress(pts))
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if p, ok := NewProgress(w).(*textProgress); !ok || p.tty {
		t.Errorf("a pipe gets %#v, want plain lines", NewProgress(w))
	}
	var buf bytes.Buffer
	if p := NewProgress(&buf).(*textProgress); p.tty {
		t.Error("a buffer is no terminal")
	}
}

func itoa(n int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
		if n == 0 {
			return string(b)
		}
	}
}
