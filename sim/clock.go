package sim

import "container/heap"

// eventKind says what an event does when it fires.
type eventKind uint8

const (
	evArrive    eventKind = iota // a query reaches the coordinator
	evDeliver                    // an iteration reaches a node or the coordinator's sink
	evBatchDone                  // a node finishes one layer of one batch
	evFeed                       // offline feeder issues a query
	evCallback                   // a policy's timer
)

// event is one entry of the virtual clock. seq breaks ties in insertion
// order, which keeps runs deterministic.
type event struct {
	at   float64
	seq  uint64
	kind eventKind
	node int32 // node index (evBatchDone, evDeliver); -1 = sink
	gen  uint32
	it   *iter
	q    *query
	fn   func()
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *eventHeap) Pop() any {
	old := *h
	n := len(old)
	e := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return e
}

// clock is the virtual clock: the current time and the pending events.
type clock struct {
	now    float64
	seq    uint64
	events eventHeap
	fired  uint64
}

func (c *clock) schedule(e *event) {
	if e.at < c.now {
		e.at = c.now
	}
	c.seq++
	e.seq = c.seq
	heap.Push(&c.events, e)
}

func (c *clock) next() (*event, bool) {
	if len(c.events) == 0 {
		return nil, false
	}
	e := heap.Pop(&c.events).(*event)
	c.now = e.at
	c.fired++
	return e, true
}
