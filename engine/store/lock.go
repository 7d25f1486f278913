package store

import (
	"context"
	"fmt"
	"os"
	"time"
)

// fileLock is an exclusive advisory lock on a file, held between
// processes (and between goroutines: each lock opens its own descriptor).
type fileLock struct {
	f *os.File
}

// lockFile waits for the lock on path, polling so that ctx can end the
// wait (the OS's blocking lock cannot be cancelled).
func lockFile(ctx context.Context, path string) (*fileLock, error) {
	wait := 5 * time.Millisecond
	for {
		l, ok, err := tryLockFile(path)
		if err != nil {
			return nil, err
		}
		if ok {
			return l, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("store: waiting for %s: %w", path, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}

// tryLockFile takes the lock on path if it is free.
func tryLockFile(path string) (*fileLock, bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, fmt.Errorf("store: lock: %w", err)
	}
	ok, err := tryLock(f)
	if err != nil || !ok {
		f.Close()
		if err != nil {
			return nil, false, fmt.Errorf("store: lock %s: %w", path, err)
		}
		return nil, false, nil
	}
	return &fileLock{f: f}, true, nil
}

func (l *fileLock) unlock() {
	unlock(l.f)
	l.f.Close()
}
