package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// TestFloorSQLiteHandsOutEachTaskOnce: the SQLite floor store's grouped transactions, driven by
// callers as the floor agents drive it (a claim, then completions fused with the next claim),
// hand out every task exactly once, complete each one, log one entry per completion and count
// them on the execution row; a completion with a stale fencing token is refused.
func TestFloorSQLiteHandsOutEachTaskOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const tasks, callers = 300, 4
	f, err := newFloorSQLite(ctx, tasks)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	go f.run(ctx)
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
		errs = make([]error, callers)
	)
	for i := range callers {
		wg.Go(func() {
			instance := fmt.Sprintf("agent-%02d", i+1)
			ans := f.do(ctx, &floorReq{instance: instance, done: make(chan floorAns, 1)})
			for ans.err == nil && ans.next != "" {
				mu.Lock()
				seen[ans.task]++
				mu.Unlock()
				ans = f.do(ctx, &floorReq{complete: ans.next, token: ans.token, instance: instance, done: make(chan floorAns, 1)})
			}
			errs[i] = ans.err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != tasks {
		t.Fatalf("%d tasks handed out, want %d", len(seen), tasks)
	}
	for task, n := range seen {
		if n != 1 {
			t.Errorf("task %s handed out %d times", task, n)
		}
	}
	var logged, completed, lastSeq, done int
	if err := f.db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM log), completed_tasks, last_seq,
		(SELECT count(*) FROM tasks WHERE status = 'completed') FROM executions`).Scan(&logged, &completed, &lastSeq, &done); err != nil {
		t.Fatal(err)
	}
	if logged != tasks || completed != tasks || lastSeq != tasks || done != tasks {
		t.Errorf("log %d, completed_tasks %d, last_seq %d, tasks completed %d: want %d each", logged, completed, lastSeq, done, tasks)
	}
	if txs, reqs := f.counts(); reqs != tasks+callers || txs < 1 || txs > reqs {
		t.Errorf("%d transactions for %d requests, want %d requests", txs, reqs, tasks+callers)
	}
	stale := f.do(ctx, &floorReq{complete: "asg-000000", token: 1, instance: "agent-01", done: make(chan floorAns, 1)})
	if stale.err == nil {
		t.Error("a completion with a stale fencing token was taken")
	}
}
