package postgres

import (
	"context"
	"fmt"
)

// LeadHolder answers the backend process id of the session that holds the named leadership
// (TryLead's advisory lock) in this database, or 0 when no session holds it. It runs on any
// pooled connection, so a leader can check that the session it took the leadership on is still
// the holder: when that session ends (Postgres restarted, the connection was cut or terminated)
// the lock is gone while the rest of the pool goes on working, and another replica may lead.
func (s *Store) LeadHolder(ctx context.Context, name string) (int64, error) {
	key := uint64(leadKey(name))
	var pid int64
	// A bigint advisory key is stored as classid (high 32 bits), objid (low 32 bits), objsubid 1.
	err := s.Pool().QueryRow(ctx, `SELECT COALESCE(max(pid), 0) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND classid::bigint = $1 AND objid::bigint = $2`, int64(key>>32), int64(key&0xffffffff)).Scan(&pid)
	if err != nil {
		return 0, fmt.Errorf("scheduler store: holder of %q: %w", name, err)
	}
	return pid, nil
}
