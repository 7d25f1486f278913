package consensus

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// stallMeter measures the time this process could not run on time: a
// goroutine asks to wake every stallPeriod and records each wake that
// came more than stallMin late. Such a wake means that no thread of the
// process ran its timers meanwhile, so Raft's timers, heartbeats and
// RPCs were held up as long: the OS ran other processes (on two busy
// shared cores an independent process that only sleeps sees the same
// stalls at the same moments, up to seconds long), or a GC
// stop-the-world waited for a thread the OS had descheduled.
//
// Waits (cluster.until) do not count stalled time against their
// timeout, and the election bounds add it (electionBound): both are
// about the cluster's progress while it can run, not the machine's.
type stallMeter struct {
	mu     sync.Mutex
	stalls []stall
	done   chan struct{}
	wg     sync.WaitGroup
}

// stall is a span in which the meter's wake was overdue.
type stall struct {
	at time.Time // when the wake was due
	d  time.Duration
}

const (
	stallPeriod = 2 * time.Millisecond
	// stallMin is the lateness below which a wake counts as on time:
	// the Go scheduler's own latency on two busy cores (a 10 ms
	// preemption quantum) stays under it.
	stallMin = 10 * time.Millisecond
	// stallKeep bounds the record: no wait or bound looks further back.
	stallKeep = 10 * time.Minute
)

func newStallMeter() *stallMeter {
	m := &stallMeter{done: make(chan struct{})}
	m.wg.Add(1)
	go m.run()
	return m
}

func (m *stallMeter) run() {
	defer m.wg.Done()
	tk := time.NewTimer(stallPeriod)
	defer tk.Stop()
	due := time.Now().Add(stallPeriod)
	for {
		select {
		case <-m.done:
			return
		case <-tk.C:
		}
		now := time.Now()
		if late := now.Sub(due); late > stallMin {
			m.mu.Lock()
			for len(m.stalls) > 0 && now.Sub(m.stalls[0].at) > stallKeep {
				m.stalls = m.stalls[1:]
			}
			m.stalls = append(m.stalls, stall{at: due, d: late})
			m.mu.Unlock()
		}
		due = now.Add(stallPeriod)
		tk.Reset(stallPeriod)
	}
}

func (m *stallMeter) stop() {
	close(m.done)
	m.wg.Wait()
}

// in returns the stalls that overlap [from, to), clipped to it.
func (m *stallMeter) in(from, to time.Time) stalls {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out stalls
	for _, s := range m.stalls {
		start, end := s.at, s.at.Add(s.d)
		if !end.After(from) || !start.Before(to) {
			continue
		}
		if start.Before(from) {
			start = from
		}
		if end.After(to) {
			end = to
		}
		out = append(out, stall{at: start, d: end.Sub(start)})
	}
	return out
}

type stalls []stall

func (ss stalls) total() time.Duration {
	var t time.Duration
	for _, s := range ss {
		t += s.d
	}
	return t
}

// describe lists the stalls as offset+length from from.
func (ss stalls) describe(from time.Time) string {
	if len(ss) == 0 {
		return "no stall"
	}
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = fmt.Sprintf("%v+%v", s.at.Sub(from).Round(time.Millisecond), s.d.Round(time.Millisecond))
	}
	return fmt.Sprintf("%d stalls of %v in all [%s]", len(ss), ss.total().Round(time.Millisecond), strings.Join(parts, " "))
}

// electionBound is how long hashicorp/raft (v1.8.0) may take to elect a
// leader, with the test's heartbeat timeout H and election timeout E
// (150 ms each), from a moment when no live voter hears a leader any
// more (a start, or the leader's kill):
//
//   - a follower's timer fires every U[H, 2H), and the follower stands
//     once the leader has been silent for H. After a kill every live
//     voter has stood within 3H (its timer fired just before H of
//     silence, then again up to 2H later); at a start, with no leader
//     ever, within 2H. That is detect.
//   - A candidate that loses its pre-vote (voters whose own timers have
//     not fired yet still have a leader and refuse it) or splits the
//     vote stands again after U[E, 2E). So once every voter has stood,
//     a campaign starts within 2E, and it wins unless it splits the
//     vote.
//   - Two split votes are allowed, 2E each. (Measured beside a CPU
//     burner: of 516 failovers without a stall 6 split the vote once,
//     none twice, and none took over 0.51 s; of 670 in all, none took
//     over 0.59 s once the stalls are taken out.)
//
// A stall of this process (stallMeter) holds every timer up by its
// length, and the timers that fell due during it fire together at its
// end: candidates that stand at the same instant split the vote, and a
// candidate's election timer can beat the votes it already has. So each
// stall adds its length and one round (2E).
//
// After a kill, at the test's timings: 3H + 2E + 2·2E = 1.35 s without
// a stall; at a start, 2H + 2E + 2·2E = 1.2 s.
func electionBound(detect time.Duration, st stalls) time.Duration {
	const round = 2 * testElection
	return detect + round + 2*round + st.total() + time.Duration(len(st))*round
}
