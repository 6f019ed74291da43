package worker

import (
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/proc"
)

// countingHandler is a text handler that counts the loggers derived from it with attributes.
type countingHandler struct {
	slog.Handler
	withs *atomic.Int64
}

func (c countingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c.withs.Add(1)
	return countingHandler{Handler: c.Handler.WithAttrs(attrs), withs: c.withs}
}

func (c countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{Handler: c.Handler.WithGroup(name), withs: c.withs}
}

// An assignment's log lines name it (assignment, execution, attempt, task), and the logger
// with those attributes is built only when a line is logged at the worker's level: at warn, a
// task that logs nothing builds none (issue 17: slog's With formats the attributes at once).
func TestAssignmentLoggerIsBuiltOnlyToLog(t *testing.T) {
	t.Parallel()
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelWarn} {
		t.Run(level.String(), func(t *testing.T) {
			t.Parallel()
			out := proc.NewTailBuffer(1 << 20) // safe for the worker's goroutines
			withs := &atomic.Int64{}
			h := startWorker(t, func(c *Config) {
				c.Logger = slog.New(countingHandler{Handler: slog.NewTextHandler(out, &slog.HandlerOptions{Level: level}), withs: withs})
			})
			h.sched.push(claimed(t, &commonv1.Task{Id: "l1", Title: "logged", Command: "true"}, ""))
			c := h.complete()
			require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
			before := withs.Load()
			eventually(t, 20*time.Second, func() bool { return strings.Contains(out.String(), "assignment completed") || level > slog.LevelInfo },
				"the completion is logged at info")
			if level > slog.LevelInfo {
				require.NotContains(t, out.String(), "assignment completed")
				h.sched.push(claimed(t, &commonv1.Task{Id: "l2", Title: "quiet", Command: "true"}, ""))
				h.complete()
				require.Equal(t, before, withs.Load(), "a task that logged nothing built its logger")
				return
			}
			for _, line := range strings.Split(out.String(), "\n") {
				if strings.Contains(line, "assignment completed") {
					for _, want := range []string{"assignment=" + c.GetAssignmentId(), "execution=", "attempt=1", "task=l1", "result=COMPLETION_RESULT_SUCCEEDED"} {
						require.Contains(t, line, want)
					}
					return
				}
			}
			t.Fatalf("no completion line in:\n%s", out.String())
		})
	}
}
