package consensus

import (
	"context"
	"errors"
	"testing"
	"time"
)

// lostFuture is a raft future that is never answered, as hashicorp/raft
// leaves one whose entry committed but was not applied when it shut down.
type lostFuture struct{}

func (lostFuture) Error() error { select {} }

// TestWaitEndsWhenClosing: a leader loop waiting on a future Raft never
// answers returns once the member closes, so that Close and halt, which
// wait for the loops, end (a halt hung for 21 minutes so, after
// TestElectionAndFailover, with the leader loop in an AddVoter).
func TestWaitEndsWhenClosing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := &raftNode{ctx: ctx}
	done := make(chan error, 1)
	go func() { done <- r.wait(lostFuture{}) }()
	select {
	case err := <-done:
		t.Fatalf("wait returned %v before the member closed", err)
	case <-time.After(20 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("wait: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not return after the member closed")
	}
}
