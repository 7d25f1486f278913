package consensus

import "fmt"

// The actions a leader decision (Decide, decide.go) asks the leader loop
// (leader.go) to carry out against Raft: the vocabulary the node and the
// simulator share.

// Action is what a leader decision asks the loop to do: Append,
// AddNonvoter, AddVoter, RemoveServer, Demote or TransferLeadership.
type Action interface {
	fmt.Stringer
	action()
}

// Append appends an event to the replicated log.
type Append struct {
	Event Event
	Why   string // words for the log; the event says the rest
}

// AddNonvoter adds a member to Raft's configuration as a non-voter.
type AddNonvoter struct{ ID string }

// AddVoter makes a server a voter.
type AddVoter struct{ ID string }

// RemoveServer removes a departed server from Raft's configuration.
type RemoveServer struct{ ID string }

// Demote makes a voter a non-voter.
type Demote struct{ ID string }

// TransferLeadership hands leadership to another voter (a drained leader
// does, before it leaves).
type TransferLeadership struct{}

func (Append) action()             {}
func (AddNonvoter) action()        {}
func (AddVoter) action()           {}
func (RemoveServer) action()       {}
func (Demote) action()             {}
func (TransferLeadership) action() {}

func (a Append) String() string {
	if a.Why == "" {
		return "append " + a.Event.Kind().String()
	}
	return "append " + a.Event.Kind().String() + ": " + a.Why
}
func (a AddNonvoter) String() string      { return "add non-voter " + a.ID }
func (a AddVoter) String() string         { return "add voter " + a.ID }
func (a RemoveServer) String() string     { return "remove server " + a.ID }
func (a Demote) String() string           { return "demote " + a.ID }
func (TransferLeadership) String() string { return "transfer leadership" }
