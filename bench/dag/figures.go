package main

// The execution log's figures: latencies, throughput, counts and the agents' phases.

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/clustertest"
)

// edgeEntries answers the store time of the first LEASE_GRANTED and of the last TASK_COMPLETED
// entry (zero when there is none). The store's clock is this machine's.
func edgeEntries(entries []*commonv1.LogEntry) (first, last time.Time) {
	for _, en := range entries {
		switch en.GetEventType() {
		case commonv1.EventType_EVENT_TYPE_LEASE_GRANTED:
			if first.IsZero() {
				first = en.GetTime().AsTime()
			}
		case commonv1.EventType_EVENT_TYPE_TASK_COMPLETED:
			last = en.GetTime().AsTime()
		}
	}
	return first, last
}

// waitEnd waits for the execution's ending entry (EXECUTION_COMPLETED or EXECUTION_CANCELLED)
// and answers the wall time from start to that entry's store time (the store's clock is this
// machine's), so that the poll's pace does not add to it.
//
// Each poll asks only for an ending entry newer than the last poll's newest seq (the response's
// last_seq): the store scans the entries written since then and decodes none, so the observer
// costs the run one cheap read per followPace. The entries, the figures' input, are read after
// the run (clustertest.ExecutionLog), outside its wall and its CPU figures. Until 2026-12-07 the log was read as
// it grew, every entry decoded and sent during the run: on the 1,000-task fan-out with agent
// processes, 8.7 % of converge dev's CPU samples on a loaded host, and 1.525 → 1.46 ms of its CPU
// per task (medians of 8 alternated quiet pairs) once it stopped. Polling GetExecution every 20 ms
// cost ≈ 8 % too, and WatchExecution's tail reads the execution's snapshot per batch of entries
// (issue 17).
// A process of procs (the deployment's) that has exited ends the wait with its log's tail.
func waitEnd(ctx context.Context, c schedulerv1.SchedulerServiceClient, id string, start time.Time, timeout time.Duration, procs []*clustertest.Process) (time.Duration, error) {
	ending := []commonv1.EventType{commonv1.EventType_EVENT_TYPE_EXECUTION_COMPLETED, commonv1.EventType_EVENT_TYPE_EXECUTION_CANCELLED}
	for seen := int64(0); ; {
		res, err := c.GetExecutionLog(ctx, &schedulerv1.GetExecutionLogRequest{ExecutionId: id, AfterSeq: seen, Limit: 1, EventTypes: ending})
		if err != nil {
			return 0, err
		}
		if es := res.GetEntries(); len(es) > 0 {
			wall := time.Since(start)
			if at := es[0].GetTime().AsTime().Sub(start); at > 0 && at < wall {
				wall = at
			}
			return wall, nil
		}
		seen = max(seen, res.GetLastSeq())
		if time.Since(start) > timeout {
			return 0, fmt.Errorf("execution %s did not end in %s", id, timeout)
		}
		if err := exited(procs); err != nil {
			return 0, fmt.Errorf("execution %s: %w", id, err)
		}
		time.Sleep(followPace)
	}
}

// exited is an error naming the first of procs that has exited, with its log's tail; nil while
// every one runs.
func exited(procs []*clustertest.Process) error {
	for _, p := range procs {
		if p.Exited() {
			return fmt.Errorf("%s exited before the run ended (%v); its log ends:\n%s", p.Name, p.ExitErr(), p.Tail(20))
		}
	}
	return nil
}

// followPace is how often waitEnd asks for the ending entry while the run goes.
const followPace = 10 * time.Millisecond

// figures reads the latencies, throughput and counts from the execution log.
func figures(r *side, g graph, entries []*commonv1.LogEntry) {
	index := map[string]int{}
	for i := range g.deps {
		index[taskID(i)] = i
	}
	granted := map[string]time.Time{}
	completed := map[int]time.Time{}
	started := map[int]time.Time{}      // first TASK_STARTED of each task
	startedAt := map[string]time.Time{} // the store time of each task's TASK_STARTED entry
	lastDone := map[string]time.Time{}
	var claimLat, gaps []time.Duration
	var first, last time.Time
	for _, en := range entries {
		at := en.GetTime().AsTime()
		i, isTask := index[en.GetTaskId()]
		switch en.GetEventType() {
		case commonv1.EventType_EVENT_TYPE_LEASE_GRANTED:
			if !isTask {
				continue
			}
			granted[en.GetTaskId()] = at
			if en.GetContext().AsMap()["eager"] == true {
				r.EarlyLeases++
			}
			if first.IsZero() {
				first = at
			}
			if d, ok := lastDone[en.GetInstanceId()]; ok {
				gaps = append(gaps, at.Sub(d))
			}
		case commonv1.EventType_EVENT_TYPE_TASK_STARTED:
			if !isTask {
				continue
			}
			startedAt[en.GetTaskId()] = at
			// When the task really started (the agent's clock, the same machine's here): a short
			// task's started event reaches the Scheduler with its completion, its entry's time is
			// the completion's.
			if st := en.GetSourceTime(); st.IsValid() {
				at = st.AsTime()
			}
			if gt, ok := granted[en.GetTaskId()]; ok {
				claimLat = append(claimLat, at.Sub(gt))
			}
			if _, ok := started[i]; !ok {
				started[i] = at
			}
		case commonv1.EventType_EVENT_TYPE_TASK_COMPLETED:
			if !isTask {
				continue
			}
			last = at
			r.Completed++
			if st, ok := startedAt[en.GetTaskId()]; ok && st.Equal(at) {
				r.StartedWithCompletion++
			}
			completed[i] = at
			lastDone[en.GetInstanceId()] = at
		case commonv1.EventType_EVENT_TYPE_TASK_REQUEUED:
			r.Requeued++
		case commonv1.EventType_EVENT_TYPE_WAVE_STARTED:
			r.Waves++
		}
	}
	if span := last.Sub(first); span > 0 {
		r.TasksPerS = float64(r.Completed) / span.Seconds()
	}
	r.GapP50Ms, r.GapP99Ms = msf(pct(gaps, 50)), msf(pct(gaps, 99))
	lat := claimLat
	r.Latency = "claim→start"
	if g.edges() > 0 {
		r.Latency = "dependency done→dependent start"
		lat = nil
		for i, ds := range g.deps {
			s, ok := started[i]
			if len(ds) == 0 || !ok {
				continue
			}
			var ready time.Time
			for _, d := range ds {
				if c := completed[d]; c.After(ready) {
					ready = c
				}
			}
			if !ready.IsZero() {
				lat = append(lat, s.Sub(ready))
			}
		}
	}
	r.LatP50Ms, r.LatP99Ms, r.LatMaxMs = msf(pct(lat, 50)), msf(pct(lat, 99)), msf(pct(lat, 100))
}

// agentPhases reads converge_agent_task_phase_seconds from the agents' /metrics (Prometheus
// text) and answers each phase's mean milliseconds per task over all agents; nil when no agent
// exports it (an agent older than the histogram).
func agentPhases(addrs []string) map[string]float64 {
	sum, count := map[string]float64{}, map[string]float64{}
	for _, a := range addrs {
		res, err := http.Get("http://" + a + "/metrics")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			var m map[string]float64
			switch {
			case strings.HasPrefix(line, "converge_agent_task_phase_seconds_sum{"):
				m = sum
			case strings.HasPrefix(line, "converge_agent_task_phase_seconds_count{"):
				m = count
			default:
				continue
			}
			_, rest, _ := strings.Cut(line, `phase="`)
			phase, rest, _ := strings.Cut(rest, `"`)
			fields := strings.Fields(rest)
			if len(fields) == 0 {
				continue
			}
			if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
				m[phase] += v
			}
		}
	}
	if len(sum) == 0 {
		return nil
	}
	// Per task: every task passes claim_heartbeat once (its count is the number of tasks).
	tasks := count["complete"]
	out := map[string]float64{}
	for p, s := range sum {
		if tasks > 0 {
			out[p] = math.Round(s/tasks*1e6) / 1e3
		}
	}
	return out
}

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pct is the p-th percentile of ds (nearest rank); 0 of none.
func pct[T cmp.Ordered](ds []T, p int) T {
	if len(ds) == 0 {
		var zero T
		return zero
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}
