package consensus

import (
	"sync"

	"go.uber.org/zap"
)

// feed owns the subscriptions to the local state (Watch): it hears of
// every record raft's FSM goroutine folds in and every snapshot restore,
// writes the applied-map log (maplog.go), hands the change to each
// subscriber, and wakes the member and leader loops.
type feed struct {
	log          *zap.SugaredLogger
	kickM, kickL chan struct{}

	mu       sync.Mutex
	watchers map[int]chan Change
	nextW    int
}

func newFeed(log *zap.SugaredLogger, kickM, kickL chan struct{}) *feed {
	return &feed{log: log, kickM: kickM, kickL: kickL, watchers: map[int]chan Change{}}
}

// watch subscribes; see Consensus.Watch.
func (f *feed) watch(buf int) (changes <-chan Change, stop func()) {
	ch := make(chan Change, max(buf, 1))
	f.mu.Lock()
	id := f.nextW
	f.nextW++
	f.watchers[id] = ch
	f.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			f.mu.Lock()
			if _, ok := f.watchers[id]; ok {
				delete(f.watchers, id)
				close(ch)
			}
			f.mu.Unlock()
		})
	}
}

// applied runs on raft's FSM goroutine after each admitted record.
func (f *feed) applied(idx uint64, r Record, s State) {
	if _, ok := r.Event.(MapCommitted); ok {
		f.logMapApplied(idx, s.Committed())
	}
	f.notify(Change{Index: idx, Record: r, State: s})
}

// restored runs on raft's FSM goroutine after a snapshot restore.
func (f *feed) restored(s State) {
	f.logMapRestored(s)
	f.notify(Change{State: s})
}

func (f *feed) notify(ch Change) {
	f.mu.Lock()
	for _, w := range f.watchers {
		select {
		case w <- ch:
		default:
		}
	}
	f.mu.Unlock()
	kick(f.kickM)
	kick(f.kickL)
}

// closeAll ends every subscription (the member closed).
func (f *feed) closeAll() {
	f.mu.Lock()
	for id, ch := range f.watchers {
		delete(f.watchers, id)
		close(ch)
	}
	f.mu.Unlock()
}

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
