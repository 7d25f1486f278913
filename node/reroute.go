package node

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	ecore "github.com/stratanet/strata/node/entry"
	"github.com/stratanet/strata/routing"
)

// reroute finds a path that avoids the failed peers, waiting for the
// leader's repair while none exists. Peers that can never hold the
// session are avoided for good: without them, it fails at once.
func (g *generation) reroute(ctx context.Context) (routing.Path, error) {
	e := g.e
	deadline := e.cfg.clock.Now().Add(e.cfg.repairWait)
	waited := false
	for {
		p, err := ecore.Route(g.gen.Replay, func(avoid []string) (routing.Path, error) { return e.routeNow(g.routeReq(avoid)) })
		if err == nil {
			if waited {
				e.cfg.log.Info("path found after waiting", zap.Duration("waited", e.cfg.clock.Since(g.gen.FailedAt)))
			}
			return p, nil
		}
		if len(g.gen.Hard) > 0 {
			if _, err2 := e.route(g.routeReq(nil)); err2 == nil {
				return routing.Path{}, fmt.Errorf("%w: the session does not fit the KV memory of %d hop(s) with the only copies of some layers",
					ErrNoCapacity, len(g.gen.Hard))
			}
		}
		if errors.Is(err, ErrUncovered) {
			// No repair can come until more nodes join.
			return routing.Path{}, fmt.Errorf("%w: %w", ErrSessionLost, err)
		}
		if !errors.Is(err, routing.ErrNoPath) || e.cfg.clock.Now().After(deadline) {
			if n := len(g.gen.Disputed); n > 0 {
				// The hop and the checkers of a failed spot check may not
				// serve it again: one of them gave wrong rows.
				return routing.Path{}, fmt.Errorf("%w: %w: no path avoids the %d node(s) of a failed spot check within %v: %w",
					ErrSessionLost, ErrNoCapacity, n, e.cfg.repairWait, err)
			}
			return routing.Path{}, fmt.Errorf("%w: %w: no repair within %v: %w", ErrSessionLost, ErrNoCapacity, e.cfg.repairWait, err)
		}
		if !waited {
			e.cfg.log.Warn("no path; waiting for a repair", zap.Duration("up_to", e.cfg.repairWait))
			waited = true
		}
		select {
		case <-ctx.Done():
			return routing.Path{}, ctx.Err()
		case <-e.ctx.Done():
			return routing.Path{}, ErrClosed
		case <-e.cfg.clock.After(repairPoll):
		}
	}
}
