package node

import "github.com/stratanet/strata/node/trust"

// VerifyStats are an entry's spot-check counts (package trust's).
type VerifyStats = trust.Stats

// CheckRecord is one conclusive spot check (package trust's).
type CheckRecord = trust.CheckRecord

func (e *entry) verifyStats() VerifyStats {
	s := e.vc.Stats()
	s.Rate = e.verifyRate()
	if e.swarmRate != nil {
		s.SwarmRate, s.HasSwarmRate = e.swarmRate()
	}
	return s
}
