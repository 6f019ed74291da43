package sqlite

import (
	"context"
	"path/filepath"
	"sync"

	"github.com/converge-dev/converge/platform/database"
)

// leads are the leaderships held in this process, by database and name. A database is its file
// (two stores of one file share it) or, in memory, its handle.
var leads = struct {
	sync.Mutex
	held map[leadKey]bool
}{held: map[leadKey]bool{}}

type leadKey struct {
	db   any
	name string
}

// TryLead takes the named leadership unless a store of the same database in this process holds
// it: SQLite is used by one process, so no other can.
func (s *Store) TryLead(_ context.Context, name string) (bool, func(), error) {
	key := leadKey{db: s.DB(), name: name}
	if s.Path() != database.SQLiteMemory {
		if abs, err := filepath.Abs(s.Path()); err == nil {
			key.db = abs
		}
	}
	leads.Lock()
	defer leads.Unlock()
	if leads.held[key] {
		return false, func() {}, nil
	}
	leads.held[key] = true
	var once sync.Once
	return true, func() {
		once.Do(func() {
			leads.Lock()
			delete(leads.held, key)
			leads.Unlock()
		})
	}, nil
}
