// Package consensus keeps the swarm's one authoritative layer map.
//
// It runs hashicorp/raft over libp2p streams (/strata/raft/1) on the
// swarm's host. Every log entry is a past-tense event (NodeJoined,
// NodeLeft, NodeDraining, MapProposed, StageReady, MapCommitted,
// WarmupAbandoned) and the FSM folds them into one read-only State: the
// members and their capabilities, the committed layers.LayerMap, and the
// pending one with each node's readiness. The fold, State.Apply, is a pure
// function of the state and the record, so replaying the same log always
// gives the same state, on every member.
//
// A bounded set of voters (3, or 5 once there are enough stable, directly
// reachable members) runs the elections; every other member is a Raft
// non-voter, so every member reads the committed and pending maps
// locally. Once the founder signed a steward set into the state
// (StewardsSet, stewards.go), only stewards are voters: a crowd of Sybil
// members cannot elect a leader or write the map. Every member checks
// the set's signature when it folds it.
//
// Voter changes never strand an election. hashicorp/raft refuses its
// vote to a candidate that is not a voter in the refusing server's
// latest configuration, so a voter that missed a promotion, once the
// leader is gone, can block every election for good. The leader
// therefore learns from its transport what each follower acknowledged
// (progress.go), and Decide changes voters, or hands leadership over,
// only once every live voter of the resulting configuration holds the
// latest one (RaftServer.Lagging); Close waits for the same before it
// transfers leadership. The harness in handover_test.go drives both
// sequences that led there and shows the swarm stuck without the wait;
// `make handovers` runs it 1,000 times under CPU load.
//
// The leader carries out the placement policy of package layers: on a
// join, a leave, or when a rebalance pays, it plans, appends MapProposed,
// waits while the nodes with moves load their new ranges next to their
// old ones (warmup), and appends MapCommitted once every stage of the
// pending map reported StageReady. A node that misses the warmup deadline
// is dropped and the leader plans again. The committed map changes only
// by commits of fully loaded maps: make before break.
//
// The policies are pure functions of plain data, as the fold is.
// Decide is the leader's: given the State, Raft's servers with their
// suffrage, liveness, the clock and the planner (LeaderInput) and the
// memory of the term (LeaderState), it returns one Action (Append,
// AddNonvoter, AddVoter, RemoveServer, Demote, TransferLeadership) as
// data; the leader loop (leader.go) only gathers the input and executes
// the action. DecideWarmup is the member's: which range to load, which
// load to cancel, what to release. The scripts in testdata/leader check
// Decide without Raft; a simulator may call both directly.
//
// A member (Consensus, api.go: the wiring and the public surface) is
// made of parts that each own one thing: raftNode (raftnode.go) Raft,
// its transport and stores, appends and the Raft configuration; feed
// (feed.go) the subscriptions to the state and the applied-map log;
// leader (leader.go) the leader loop that carries out Decide and the
// requests it answers as leader; member (warmup.go) this node's own
// part: its join, the members' addresses, its loads and releases, and
// the steward set it signs as founder; ctl (rpc.go) the control RPC.
// The state likewise: State is the value and its readers, fold
// (fsm.go and each event's file) the rules by which a record changes
// it, Stewardship and SwarmConfig the steward set and the settings it
// holds.
//
// consensus never loads weights: a StageLoader, which the node provides,
// does.
package consensus
