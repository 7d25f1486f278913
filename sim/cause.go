package sim

// cause is why a query's attempt broke.
type cause uint8

const (
	causeNone         cause = iota
	causeDied               // a node on its route died
	causeMoved              // a node on its route changed range or left the map while up
	causeQueueFull          // a hop's admission FIFO was full
	causeQueueTimeout       // it waited the queue timeout for KV memory
	causeNoKV               // the session can never fit a hop's KV memory
	causeStale              // routed on a map the hop has since left
	causeNoHop              // no next hop (replays of Helix's schedulers)
	causePrefixMiss         // a later hop lacked the prefix the first hop resumed
	nCauses
)

var causeNames = [nCauses]string{"none", "node_died", "moved", "queue_full", "queue_timeout", "kv_never_fits", "stale_route", "no_hop", "prefix_miss"}

func (c cause) String() string {
	if c < nCauses {
		return causeNames[c]
	}
	return "unknown"
}

// busy reports whether the stage scheduler answers this cause with
// CodeBusy, which the real entry backs off on instead of counting a replay.
func (c cause) busy() bool { return c == causeQueueFull || c == causeQueueTimeout }

// Why a request failed for good, as failed_by_cause counts it.
const (
	// FailReplaysExhausted: the entry's replay cap (node.DefaultMaxReplays)
	// was spent.
	FailReplaysExhausted = "replays_exhausted"
	// FailBusyTooLong: hops answered busy for longer than the entry's
	// repair wait (node.DefaultRepairWait).
	FailBusyTooLong = "busy_too_long"
	// FailNoRoute: no path was found within the client's wait.
	FailNoRoute = "no_route"
	// FailNotReplayed: the policy's client does not replay this break
	// (Parallax always, Petals once tokens were generated).
	FailNotReplayed = "not_replayed"
	// FailNoKV: every path has a hop the session can never fit.
	FailNoKV = "kv_never_fits"
	// FailQueueRefused: the entry's admission queue refused the request
	// (its deadline passed with no path with KV room, or it was full).
	FailQueueRefused = "entry_queue_refused"
)
