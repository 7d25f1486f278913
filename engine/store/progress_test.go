package store

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// fakeClock steps by a fixed amount at every reading.
func fakeClock(step time.Duration) func() time.Time {
	t := time.Unix(1700000000, 0)
	return func() time.Time {
		t = t.Add(step)
		return t
	}
}

// feed runs a 100 MiB file through p in 1 MiB steps.
func feed(p *textProgress, fail bool) {
	p.Start("m.gguf", 100<<20, 10<<20)
	for range 90 {
		p.Add(1 << 20)
	}
	var err error
	if fail {
		err = errors.New("boom")
	}
	p.Finish(err)
}

func TestProgressBarOnTTY(t *testing.T) {
	var buf bytes.Buffer
	p := newTextProgress(&buf, true)
	p.now = fakeClock(50 * time.Millisecond) // a redraw every second Add
	feed(p, false)
	out := buf.String()
	if n := strings.Count(out, "\r\x1b[K"); n < 40 || n > 50 {
		t.Errorf("%d redraws for 90 steps at half the redraw interval", n)
	}
	if strings.Count(out, "\n") != 2 {
		t.Errorf("a bar redraws in place: %d newlines in %q", strings.Count(out, "\n"), out)
	}
	for _, want := range []string{"m.gguf [", "=====", "100.0 MiB", "MiB/s", "ETA", "100% 100.0 MiB / 100.0 MiB", "done, 90.0 MiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("bar output lacks %q:\n%q", want, out)
		}
	}
}

func TestProgressPlainLines(t *testing.T) {
	var buf bytes.Buffer
	p := newTextProgress(&buf, false)
	p.now = fakeClock(time.Second) // a line every fifth Add
	feed(p, true)
	out := buf.String()
	if strings.Contains(out, "\r") || strings.Contains(out, "\x1b") {
		t.Errorf("plain output has terminal controls: %q", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	// Start, one line per 5 s of 90 steps of 1 s, and the failure.
	if len(lines) < 17 || len(lines) > 20 {
		t.Errorf("%d lines:\n%s", len(lines), out)
	}
	if !strings.Contains(lines[0], "resuming at 10.0 MiB") || !strings.Contains(lines[len(lines)-1], "failed") {
		t.Errorf("first %q, last %q", lines[0], lines[len(lines)-1])
	}
	if !strings.Contains(lines[2], "% ") || !strings.Contains(lines[2], "MiB/s, ETA") {
		t.Errorf("a progress line lacks percent, rate or ETA: %q", lines[2])
	}
}

func TestHuman(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536 << 20: "1.5 GiB", 3 << 40: "3.0 TiB"} {
		if got := HumanBytes(n); got != want {
			t.Errorf("HumanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
