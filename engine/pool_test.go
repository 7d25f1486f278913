package engine

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestPoolCoversEachItemOnce runs loops of many sizes and grains on pools
// of 1 to 4 goroutines and checks that every item is visited exactly once,
// in ranges of at most grain items where the loop is split, and that
// forRange returns only after the last one.
func TestPoolCoversEachItemOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 4} {
		p := newPool(threads)
		for _, n := range []int{0, 1, 2, 7, 64, 333, 4096} {
			for _, grain := range []int{0, 1, 3, 64, 5000} {
				seen := make([]atomic.Int32, n)
				var pending atomic.Int64
				pending.Store(int64(n))
				p.forRange(n, grain, minParallelWork, func(lo, hi int) {
					if lo < 0 || hi > n || lo >= hi || (threads > 1 && n > max(grain, 1) && hi-lo > max(grain, 1)) {
						t.Errorf("threads %d n %d grain %d: range [%d, %d)", threads, n, grain, lo, hi)
						return
					}
					for i := lo; i < hi; i++ {
						seen[i].Add(1)
						pending.Add(-1)
					}
				})
				if left := pending.Load(); left != 0 {
					t.Fatalf("threads %d n %d grain %d: returned with %d items pending", threads, n, grain, left)
				}
				for i := range seen {
					if c := seen[i].Load(); c != 1 {
						t.Fatalf("threads %d n %d grain %d: item %d visited %d times", threads, n, grain, i, c)
					}
				}
			}
		}
		p.close()
	}
}

// TestPoolWakesParkedWorkers lets the workers park (they stop spinning
// after spinFor), then posts a loop whose chunks wait for one another: it
// can finish only if a parked worker is woken and takes a chunk while the
// caller holds the other.
func TestPoolWakesParkedWorkers(t *testing.T) {
	p := newPool(2)
	defer p.close()
	for round := 0; round < 3; round++ {
		deadline := time.Now().Add(30 * time.Second)
		for p.sleepers.Load() != 1 {
			if time.Now().After(deadline) {
				t.Fatal("the worker never parked")
			}
			runtime.Gosched()
		}
		var arrived atomic.Int32
		p.forRange(2, 1, minParallelWork, func(lo, hi int) {
			arrived.Add(1)
			for arrived.Load() < 2 {
				if time.Now().After(deadline) {
					t.Error("the parked worker was not woken")
					return
				}
				runtime.Gosched()
			}
		})
	}
}

// TestPoolCloseJoinsWorkers checks that close returns (its workers have
// exited), whether they are spinning or parked.
func TestPoolCloseJoinsWorkers(t *testing.T) {
	for _, park := range []bool{false, true} {
		p := newPool(4)
		p.forRange(100, 1, minParallelWork, func(lo, hi int) {})
		if park {
			deadline := time.Now().Add(30 * time.Second)
			for p.sleepers.Load() != 3 {
				if time.Now().After(deadline) {
					t.Fatal("the workers never parked")
				}
				runtime.Gosched()
			}
		}
		done := make(chan struct{})
		go func() { p.close(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("park %v: close did not return", park)
		}
	}
}

// TestMatmulThreadsSameBits multiplies every packed type's matrix by a
// decode row and a prefill batch on pools of 1 to 5 goroutines (so chunks
// of every size land on every goroutine, the activations' quantisation
// split too) and wants the same bits as the portable kernel row by row on
// activations quantised by one goroutine.
func TestMatmulThreadsSameBits(t *testing.T) {
	const rows, cols, n = 203, 2048, 3
	src := make([]float32, n*cols)
	s := uint64(9)
	for i := range src {
		src[i] = float32(int64(splitmix(&s)>>40)-1<<23) / (1 << 23)
	}
	for typ, f := range quantFormats {
		var raw []byte
		for r := 0; r < rows; r++ {
			raw = encodeRow(raw, src[(r%n)*cols:(r%n+1)*cols], typ)
		}
		w := &matrix{rows: rows, cols: cols, raw: raw, qf: f, typ: typ}
		for _, tn := range []int{1, n} {
			x := newAct(src, tn, cols)
			x.prepare(w)
			want := make([]float32, tn*rows)
			nb := cols / f.block
			rb := nb * f.bytes
			for tt := 0; tt < tn; tt++ {
				for r := 0; r < rows; r++ {
					row := raw[r*rb : (r+1)*rb]
					if f.k {
						want[tt*rows+r] = dotRowQuant(f, row, x.kq[tt*cols:(tt+1)*cols], x.kd[tt*nb:(tt+1)*nb], x.kbsums[tt*cols/16:(tt+1)*cols/16], nil)
					} else {
						want[tt*rows+r] = dotRowQuant(f, row, x.q[tt*cols:(tt+1)*cols], x.d[tt*nb:(tt+1)*nb], nil, x.sums[tt*nb:(tt+1)*nb])
					}
				}
			}
			for threads := 1; threads <= 5; threads++ {
				st := &Local{pool: newPool(threads)}
				got := make([]float32, tn*rows)
				st.matmul(got, w, newAct(src, tn, cols))
				st.pool.close()
				if !sameBits(got, want) {
					t.Fatalf("%v, %d input rows, %d threads: bits differ from the portable kernel", typ, tn, threads)
				}
			}
		}
	}
}
