package consensus

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// Files under the data dir.
const (
	raftDir      = "raft"
	raftDBFile   = "raft.db"    // log and stable store (bbolt)
	addrBookFile = "peers.json" // members' multiaddrs, for elections after a restart
	snapRetain   = 2
	logCacheSize = 512
)

// stores are Raft's log store, stable store and snapshot store: in the
// data dir (bbolt and raft's file snapshot store), or in memory when
// there is none.
type stores struct {
	logs   raft.LogStore
	stable raft.StableStore
	snaps  raft.SnapshotStore
	dir    string // "" in memory
	close  func() error
}

func openStores(dataDir string, log hclog.Logger) (*stores, error) {
	if dataDir == "" {
		mem := raft.NewInmemStore()
		return &stores{logs: mem, stable: mem, snaps: raft.NewInmemSnapshotStore(), close: func() error { return nil }}, nil
	}
	dir := filepath.Join(dataDir, raftDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("consensus: data dir: %w", err)
	}
	db, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, raftDBFile)})
	if err != nil {
		return nil, fmt.Errorf("consensus: open raft store: %w", err)
	}
	logs, err := raft.NewLogCache(logCacheSize, db)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("consensus: log cache: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, snapRetain, log)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("consensus: snapshot store: %w", err)
	}
	return &stores{logs: logs, stable: db, snaps: snaps, dir: dir, close: db.Close}, nil
}

// The address book keeps each member's multiaddrs next to the Raft log.
// After a restart the log's configuration names the voters by peer ID,
// but the FSM that knows their addresses is only rebuilt once a leader
// is elected: the book breaks that circle.
type addrBook map[string][]string

func (s *stores) loadAddrBook() (addrBook, error) {
	if s.dir == "" {
		return nil, nil
	}
	b, err := os.ReadFile(filepath.Join(s.dir, addrBookFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("consensus: read address book: %w", err)
	}
	var book addrBook
	if err := json.Unmarshal(b, &book); err != nil {
		return nil, fmt.Errorf("consensus: address book: %w", err)
	}
	for id, addrs := range book {
		if len(id) > MaxIDLen || len(addrs) > MaxAddrs {
			delete(book, id)
		}
	}
	return book, nil
}

// saveAddrBook writes the book atomically; an unchanged book is not
// written again.
func (s *stores) saveAddrBook(book addrBook, prev addrBook) error {
	if s.dir == "" || equalBooks(book, prev) {
		return nil
	}
	b, err := json.Marshal(book)
	if err != nil {
		return err
	}
	path := filepath.Join(s.dir, addrBookFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("consensus: write address book: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("consensus: write address book: %w", err)
	}
	return nil
}

func equalBooks(a, b addrBook) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !slices.Equal(v, w) {
			return false
		}
	}
	return true
}
