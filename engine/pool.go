package engine

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// pool runs data-parallel loops on the calling goroutine and n-1 workers.
//
// A decode step is some two hundred short loops (a 256-row projection takes
// tens of microseconds), so two costs decide whether a second thread helps:
// waking a parked goroutine, which on a virtual machine takes about as long
// as the loop itself, and waiting at the end for a thread the OS has
// descheduled. So workers spin for a short while after each loop before
// they park, and a loop's items are claimed in chunks from a shared counter
// rather than cut into one fixed share per thread: whoever is running takes
// the next chunk. Which goroutine computes an item never changes its bits
// (every output is one goroutine's sequential sum), so neither the chunking
// nor the claiming order can reach the results.
type pool struct {
	n   int
	seq atomic.Uint64 // bumped for every loop handed to the workers
	job atomic.Pointer[poolJob]

	mu       sync.Mutex
	wake     *sync.Cond
	sleepers atomic.Int32 // workers parked or about to park on wake
	closed   atomic.Bool
	workers  sync.WaitGroup
}

// poolJob is one loop: items [0, n) in chunks of grain.
type poolJob struct {
	f      func(lo, hi int)
	n      int
	grain  int
	chunks int64
	next   atomic.Int64 // the next chunk to claim
	_      [56]byte     // keep the claim counter and the done counter apart
	done   atomic.Int64 // chunks finished
}

// spinFor is how long an idle worker keeps polling for the next loop before
// it parks: longer than the gaps inside a decode step (norms, attention),
// short enough that an idle stage costs nothing.
const spinFor = 200 * time.Microsecond

func newPool(n int) *pool {
	p := &pool{n: max(n, 1)}
	p.wake = sync.NewCond(&p.mu)
	for i := 1; i < p.n; i++ {
		p.workers.Add(1)
		go p.worker()
	}
	return p
}

func (p *pool) worker() {
	defer p.workers.Done()
	last := p.seq.Load()
	for {
		if !p.await(last) {
			return
		}
		last = p.seq.Load()
		if j := p.job.Load(); j != nil {
			j.work()
		}
	}
}

// await returns once a loop newer than seq last is posted (true) or the
// pool is closed (false): polling for spinFor, then parked on wake.
func (p *pool) await(last uint64) bool {
	var t0 time.Time
	for i := 0; ; i++ {
		if p.seq.Load() != last {
			return true
		}
		if p.closed.Load() {
			return false
		}
		if i&63 != 63 {
			continue
		}
		// Let other goroutines of this process have the thread now and
		// then, and read the clock only this often.
		runtime.Gosched()
		if t0.IsZero() {
			t0 = time.Now()
		} else if time.Since(t0) > spinFor {
			break
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// sleepers is raised before seq is read again; post bumps seq before
	// it reads sleepers: one of the two sees the other (Dekker), so a loop
	// is never posted to a worker that goes on sleeping.
	p.sleepers.Add(1)
	defer p.sleepers.Add(-1)
	for p.seq.Load() == last && !p.closed.Load() {
		p.wake.Wait()
	}
	return !p.closed.Load()
}

// work claims and runs chunks until none is left.
func (j *poolJob) work() {
	for {
		c := j.next.Add(1) - 1
		if c >= j.chunks {
			return
		}
		lo := int(c) * j.grain
		j.f(lo, min(lo+j.grain, j.n))
		j.done.Add(1)
	}
}

// minParallelWork is the multiply-adds below which handing work to other
// goroutines costs more than it saves. Which goroutine computes a row never
// changes its bits, so this only moves time.
const minParallelWork = 1 << 15

// forRange calls f on consecutive ranges [lo, hi) covering [0, n), each of
// at most grain items, spread over the pool, and returns when all are
// done. work (multiply-adds or the like) below minParallelWork runs inline,
// as does everything on a nil pool.
func (p *pool) forRange(n, grain, work int, f func(lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	if p == nil || p.n <= 1 || work < minParallelWork || n <= grain {
		f(0, n)
		return
	}
	j := &poolJob{f: f, n: n, grain: grain, chunks: int64((n + grain - 1) / grain)}
	p.job.Store(j)
	p.seq.Add(1)
	if p.sleepers.Load() > 0 {
		p.mu.Lock()
		p.wake.Broadcast()
		p.mu.Unlock()
	}
	j.work()
	// The workers' chunks are short; a worker descheduled mid-chunk is
	// waited for without holding the thread.
	for i := 0; j.done.Load() < j.chunks; i++ {
		if i&63 == 63 {
			runtime.Gosched()
		}
	}
	// Drop the loop so that its closure (and the scratch it holds) is not
	// kept alive by the pool; a worker that wakes late finds nothing to
	// claim in the one it already holds.
	p.job.CompareAndSwap(j, nil)
}

// grainFor is the chunk size, in items, for a loop over n items: about
// target items, but at least 4 chunks per goroutine so that a descheduled
// thread's share can be taken over.
func (p *pool) grainFor(n, target int) int {
	if p == nil {
		return max(1, n)
	}
	return max(1, min(target, n/(4*p.n)))
}

// close stops the workers and waits for them.
func (p *pool) close() {
	p.closed.Store(true)
	p.mu.Lock()
	p.wake.Broadcast()
	p.mu.Unlock()
	p.workers.Wait()
}
