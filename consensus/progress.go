package consensus

import (
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
)

// progressTransport is Raft's transport with a record of how far each
// follower's log matches the leader's. hashicorp/raft keeps its match
// indexes to itself, and the leader needs them: a voter change, or a
// handover, while a voter lacks the latest configuration can leave the
// swarm without a leader for good. hashicorp/raft refuses a vote to a
// candidate that is not a voter in the refusing server's latest
// configuration, so a server that missed the promotion of the candidate
// blocks every election that needs it (issue 35).
//
// The record comes from AppendEntries answers: a success means the
// follower's log equals the leader's up to the last entry sent. Pipelined
// replication is refused so that every answer passes here; Strata's log
// carries a few records a second at most, for which the round trip per
// batch costs nothing that matters.
type progressTransport struct {
	*raft.NetworkTransport

	mu    sync.Mutex
	term  uint64                   // the leader term the matches belong to
	match map[raft.ServerID]uint64 // follower → highest index known to match

	advanced func() // called after a follower's match grew

	// fault, when set (tests), is asked before each AppendEntries,
	// RequestVote and RequestPreVote with its request; an error stands
	// for a lost request.
	fault func(id raft.ServerID, req any) error
}

func newProgressTransport(t *raft.NetworkTransport, advanced func()) *progressTransport {
	return &progressTransport{NetworkTransport: t, match: map[raft.ServerID]uint64{}, advanced: advanced}
}

// AppendEntries implements raft.Transport and records a success.
func (t *progressTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if err := t.lost(id, args); err != nil {
		return err
	}
	if err := t.NetworkTransport.AppendEntries(id, target, args, resp); err != nil {
		return err
	}
	if !resp.Success {
		return nil
	}
	last := args.PrevLogEntry
	if n := len(args.Entries); n > 0 {
		last = args.Entries[n-1].Index
	}
	t.mu.Lock()
	switch {
	case args.Term < t.term:
		last = 0 // an answer to an earlier term's leader
	case args.Term > t.term:
		t.term = args.Term
		clear(t.match)
	}
	grew := last > t.match[id]
	if grew {
		t.match[id] = last
	}
	t.mu.Unlock()
	if grew {
		t.advanced()
	}
	return nil
}

// RequestVote implements raft.Transport.
func (t *progressTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if err := t.lost(id, args); err != nil {
		return err
	}
	return t.NetworkTransport.RequestVote(id, target, args, resp)
}

// RequestPreVote implements raft.WithPreVote.
func (t *progressTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if err := t.lost(id, args); err != nil {
		return err
	}
	return t.NetworkTransport.RequestPreVote(id, target, args, resp)
}

// lost is the test fault for a request to id (nil: sent).
func (t *progressTransport) lost(id raft.ServerID, req any) error {
	if t.fault == nil {
		return nil
	}
	return t.fault(id, req)
}

// AppendEntriesPipeline implements raft.Transport: no pipelining, so that
// AppendEntries sees every answer.
func (t *progressTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// matched is the highest index a follower is known to share with this
// leader in term (0: nothing known).
func (t *progressTransport) matched(term uint64, id raft.ServerID) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if term != t.term {
		return 0
	}
	return t.match[id]
}

// configScan finds the index of the latest configuration entry in the
// log: hashicorp/raft's GetConfiguration no longer reports it. Each call
// reads only the entries appended since the last, and a new term starts
// over (a follower's log may have been rewritten meanwhile).
type configScan struct {
	mu    sync.Mutex
	term  uint64
	next  uint64 // the first index not read yet
	index uint64
}

// latest is the latest configuration's index in term. Where the log was
// compacted past what was read, the configuration may sit in the
// snapshot; the compaction point then stands in for it, which is as
// late or later, so no follower counts as holding a configuration it
// lacks.
func (s *configScan) latest(logs raft.LogStore, term uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term != term {
		s.term, s.next, s.index = term, 0, 0
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return 0, fmt.Errorf("consensus: log: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return 0, fmt.Errorf("consensus: log: %w", err)
	}
	if first > 0 && s.next < first {
		s.next, s.index = first, max(s.index, first-1)
	}
	for i := max(s.next, 1); i <= last; i++ {
		// A fresh Log each time: a cached entry's Data is the cache's
		// own slice, and the bolt store decodes the next entry, uncached
		// while LogCache.StoreLogs is between bolt and its slots, into
		// whatever Data it is given: it would overwrite the cached entry,
		// which the leader then sends (TestConfigScanKeepsTheCache).
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				continue // compacted meanwhile
			}
			return 0, fmt.Errorf("consensus: log entry %d: %w", i, err)
		}
		if l.Type == raft.LogConfiguration {
			s.index = i
		}
	}
	s.next = max(s.next, last+1)
	return s.index, nil
}
