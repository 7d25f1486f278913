package store

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// Progress receives a download's progress. Add is called from several
// goroutines at once (parallel ranges); implementations lock.
type Progress interface {
	// Start begins a file of total bytes (-1: unknown), done of which are
	// already on disk (a resumed download).
	Start(file string, total, done int64)
	// Add counts n more bytes written.
	Add(n int64)
	// Finish ends the file; err is nil on success.
	Finish(err error)
	// Note prints a line about the pull (verifying, skipping a file held).
	Note(msg string)
}

// NewProgress writes progress to w: a redrawn bar with rate and ETA when w
// is a terminal, plain lines every few seconds otherwise (logs, pipes).
func NewProgress(w io.Writer) Progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	return newTextProgress(w, tty)
}

// Discard is a Progress that prints nothing.
var Discard Progress = discard{}

type discard struct{}

func (discard) Start(string, int64, int64) {}
func (discard) Add(int64)                  {}
func (discard) Finish(error)               {}
func (discard) Note(string)                {}

type textProgress struct {
	w        io.Writer
	tty      bool
	now      func() time.Time
	every    time.Duration // between redraws (tty) or lines (plain)
	barWidth int

	mu        sync.Mutex
	file      string
	total     int64
	done      int64
	startDone int64
	start     time.Time
	last      time.Time
}

func newTextProgress(w io.Writer, tty bool) *textProgress {
	p := &textProgress{w: w, tty: tty, now: time.Now, every: 5 * time.Second, barWidth: 24}
	if tty {
		p.every = 100 * time.Millisecond
	}
	return p
}

func (p *textProgress) Start(file string, total, done int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.file, p.total, p.done, p.startDone = file, total, done, done
	p.start = p.now()
	p.last = p.start
	if p.tty {
		p.draw(p.start)
		return
	}
	msg := fmt.Sprintf("%s: downloading %s", file, sizeOrUnknown(total))
	if done > 0 {
		msg += fmt.Sprintf(", resuming at %s", HumanBytes(done))
	}
	fmt.Fprintln(p.w, msg)
}

func (p *textProgress) Add(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	now := p.now()
	if now.Sub(p.last) < p.every {
		return
	}
	p.last = now
	if p.tty {
		p.draw(now)
		return
	}
	fmt.Fprintf(p.w, "%s: %s\n", p.file, p.status(now))
}

func (p *textProgress) Finish(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if p.tty {
		p.draw(now)
		fmt.Fprintln(p.w)
	}
	if err != nil {
		fmt.Fprintf(p.w, "%s: failed after %s: %v\n", p.file, HumanBytes(p.done), err)
		return
	}
	el := now.Sub(p.start)
	fmt.Fprintf(p.w, "%s: done, %s in %s (%s/s)\n", p.file, HumanBytes(p.done-p.startDone), el.Round(time.Second), HumanBytes(int64(rate(p.done-p.startDone, el))))
}

func (p *textProgress) Note(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintln(p.w, msg)
}

// draw redraws the bar line in place: carriage return, clear to the end.
func (p *textProgress) draw(now time.Time) {
	var bar string
	if p.total > 0 {
		fill := int(int64(p.barWidth) * min(p.done, p.total) / p.total)
		bar = "[" + strings.Repeat("=", fill) + strings.Repeat(" ", p.barWidth-fill) + "] "
	}
	fmt.Fprintf(p.w, "\r\x1b[K%s %s%s", p.file, bar, p.status(now))
}

// status is "42% 420.0 MiB / 1.0 GiB, 35.2 MiB/s, ETA 17s".
func (p *textProgress) status(now time.Time) string {
	el := now.Sub(p.start)
	r := rate(p.done-p.startDone, el)
	var b strings.Builder
	if p.total > 0 {
		fmt.Fprintf(&b, "%3d%% %s / %s", 100*min(p.done, p.total)/p.total, HumanBytes(p.done), HumanBytes(p.total))
	} else {
		b.WriteString(HumanBytes(p.done))
	}
	fmt.Fprintf(&b, ", %s/s", HumanBytes(int64(r)))
	if p.total > 0 {
		if r > 0 {
			eta := time.Duration(float64(p.total-p.done) / r * float64(time.Second))
			fmt.Fprintf(&b, ", ETA %s", eta.Round(time.Second))
		} else {
			b.WriteString(", ETA --")
		}
	}
	return b.String()
}

func rate(n int64, el time.Duration) float64 {
	if el <= 0 {
		return 0
	}
	return float64(n) / el.Seconds()
}

func sizeOrUnknown(n int64) string {
	if n < 0 {
		return "unknown size"
	}
	return HumanBytes(n)
}

// HumanBytes prints a byte count with a binary unit (1.5 GiB).
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
