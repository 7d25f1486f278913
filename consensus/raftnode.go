package consensus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"
)

// raftNode is the Raft shell: hashicorp/raft, its transport over the
// host's streams and its stores. It owns appending (apply), waiting on
// Raft's futures, and reading and changing the Raft configuration; it
// decides nothing (that is Decide's, carried out by the leader loop).
type raftNode struct {
	raft  *raft.Raft
	trans *raft.NetworkTransport
	prog  *progressTransport // trans, recording what followers acknowledged
	sl    *streamLayer
	st    *stores
	// cfScan finds the latest configuration's index in the log (the
	// leader loop's, and Close's once the loop stopped).
	cfScan configScan

	self    peer.ID
	fsm     *fsm
	log     *zap.SugaredLogger
	timeout time.Duration   // for appends and configuration changes
	ctx     context.Context // done: the member closes; waits end
}

// leader returns the leader this member knows of.
func (r *raftNode) leader() (peer.ID, bool) {
	_, id := r.raft.LeaderWithID()
	if id == "" {
		return "", false
	}
	p, err := peer.Decode(string(id))
	return p, err == nil
}

func (r *raftNode) isLeader() bool { return r.raft.State() == raft.Leader }

// servers returns the latest Raft configuration.
func (r *raftNode) servers() ([]Server, error) {
	f := r.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("consensus: configuration: %w", err)
	}
	var out []Server
	for _, s := range f.Configuration().Servers {
		if p, err := peer.Decode(string(s.ID)); err == nil {
			out = append(out, Server{ID: p, Voter: s.Suffrage == raft.Voter})
		}
	}
	return out, nil
}

// suffrage is p's place in this member's latest configuration.
func (r *raftNode) suffrage(p peer.ID) (in, voter bool) {
	f := r.raft.GetConfiguration()
	if f.Error() != nil {
		return false, false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == p.String() {
			return true, s.Suffrage == raft.Voter
		}
	}
	return false, false
}

// apply appends one event as the leader and returns once it is
// committed and folded in here, or the reason it was refused.
func (r *raftNode) apply(ev Event) error {
	rec := Record{At: time.Now(), Event: ev}
	if _, err := r.fsm.current().Apply(rec); err != nil {
		return err
	}
	b, err := MarshalRecord(rec)
	if err != nil {
		return err
	}
	f := r.raft.Apply(b, r.timeout)
	if err := r.wait(f); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return fmt.Errorf("%w: %w", ErrNotLeader, err)
		}
		if errors.Is(err, raft.ErrRaftShutdown) || errors.Is(err, ErrClosed) {
			return ErrClosed
		}
		return fmt.Errorf("consensus: append %s: %w", ev.Kind(), err)
	}
	if err, ok := f.Response().(error); ok {
		return err
	}
	r.log.Debugw("appended", "event", ev.Kind(), "index", f.Index())
	return nil
}

// wait returns f's error, or ErrClosed once the member is closing.
// hashicorp/raft does not answer every future when it shuts down: an
// entry that committed but was not yet applied is dropped with its
// future (the FSM goroutine returns without draining its queue;
// hashicorp/raft#498). A leader loop that waited on such a future alone
// would never end, and a crash (halt: cancel, then Raft's shutdown)
// that waits for the loops would hang with it. Should f never be
// answered, the goroutine that waits on it stays blocked: one per
// future lost at shutdown.
func (r *raftNode) wait(f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-r.ctx.Done():
		return ErrClosed
	}
}

// configChange waits for a configuration change (wait: at most until
// the member closes).
func (r *raftNode) configChange(f raft.IndexFuture) error {
	if err := r.wait(f); err != nil {
		return fmt.Errorf("raft configuration change: %w", err)
	}
	return nil
}

// handOver gives leadership up as the others can take it: by a transfer
// to another voter or, where the others alone would be no majority (two
// voters, as between two promotions), by demoting itself first, so that
// the other voter's own election wins. A transfer alone would leave that
// voter leading a configuration whose majority needs the closed member.
func (r *raftNode) handOver() bool {
	voters := 0
	for _, s := range r.raft.GetConfiguration().Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	if _, voter := r.suffrage(r.self); voters == 2 && voter {
		if err := r.raft.DemoteVoter(raft.ServerID(r.self.String()), 0, r.timeout).Error(); err != nil {
			r.log.Infow("demoting itself failed", "error", err)
			return false
		}
		return true
	}
	err := r.raft.LeadershipTransfer().Error()
	if err != nil && !errors.Is(err, raft.ErrNotLeader) {
		r.log.Infow("leadership transfer failed", "error", err)
	}
	return err == nil
}

// closeTransport closes raft's transport, then waits (at most 5 s) for
// its handlers of inbound streams, which its Close leaves running.
func (r *raftNode) closeTransport() error {
	err := r.trans.Close()
	r.sl.drain(5 * time.Second)
	return err
}
