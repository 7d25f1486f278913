package engine

import "fmt"

// PrefixStage is a Stage that can open a session on a copy of another
// session's first positions: a prefix cache hit resumes there instead of
// recomputing them. Both backends implement it.
type PrefixStage interface {
	Stage
	// NewSessionFrom reserves maxTokens positions and fills the first n
	// with src's (a session of the same stage holding at least n). The
	// new session is independent of src: either may be closed or advanced
	// without the other changing.
	NewSessionFrom(src Session, n, maxTokens int) (Session, error)
}

var (
	_ PrefixStage = (*Local)(nil)
	_ PrefixStage = (*SimStage)(nil)
)

// NewSessionFrom opens a session holding a copy of src's first n
// positions. A step then continues at position n, and its results are
// bit-identical to those of a session that computed the n positions
// itself: K and V of a position depend only on the tokens up to it.
func (s *Local) NewSessionFrom(src Session, n, maxTokens int) (Session, error) {
	ns, err := s.NewSession(maxTokens)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	from, ok := src.(*kvSession)
	switch {
	case !ok || from.st != s || from.closed:
		err = fmt.Errorf("%w: prefix source closed or from another stage", ErrSession)
	case n < 0 || n > from.n || n > maxTokens:
		err = fmt.Errorf("%w: a prefix of %d positions from a session of %d into one of %d", ErrPosition, n, from.n, maxTokens)
	}
	to := ns.(*kvSession)
	if err != nil {
		to.closed, to.k, to.v = true, nil, nil
		return nil, err
	}
	kd, vd := s.hp.CacheDims()
	for l := range to.k {
		copy(to.k[l], from.k[l][:n*kd])
		copy(to.v[l], from.v[l][:n*vd])
	}
	to.n = n
	return to, nil
}

// NewSessionFrom opens a session that holds n positions, as Local's does.
func (s *SimStage) NewSessionFrom(src Session, n, maxTokens int) (Session, error) {
	ns, err := s.NewSession(maxTokens)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	from, ok := src.(*simSession)
	switch {
	case !ok || from.closed:
		err = fmt.Errorf("%w: prefix source closed or from another stage", ErrSession)
	case n < 0 || n > from.n || n > maxTokens:
		err = fmt.Errorf("%w: a prefix of %d positions from a session of %d into one of %d", ErrPosition, n, from.n, maxTokens)
	}
	to := ns.(*simSession)
	if err != nil {
		to.closed = true
		return nil, err
	}
	to.n = n
	return to, nil
}
