package worker

import (
	"strings"
)

// Design change requests (seed 003 DCR): an executor that finds the task cannot be done as
// specified says so instead of forcing it, and the task ends BLOCKED_DCR with the request's
// text (CompleteTask's error.message); the Scheduler pauses the run until a person edits the
// task and retries it, or skips it. An executor says so by either
//
//   - printing a block that starts with a line "DESIGN CHANGE REQUEST" (any case, optionally
//     as a markdown heading or followed by ':'), up to a line "END DESIGN CHANGE REQUEST" or
//     the end of its output: an agent CLI's output, an OpenAI answer, a command's output; or
//   - (the command executor) exiting with DCRExitCode, its output being the request.
//
// No further try is made: the request is a question for a person, not a failure to retry.

// DCRExitCode is the exit status by which a task's command asks for a design change (78,
// sysexits' EX_CONFIG: the task as configured cannot be done).
const DCRExitCode = 78

// dcrMarker starts a design change request block.
const dcrMarker = "DESIGN CHANGE REQUEST"

// designChangeRequest answers the request text in output, or "".
func designChangeRequest(output string) string {
	lines := strings.Split(output, "\n")
	for i, line := range lines {
		if !isDCRStart(line) {
			continue
		}
		var body []string
		for _, l := range lines[i+1:] {
			if strings.Contains(strings.ToUpper(l), "END "+dcrMarker) {
				break
			}
			body = append(body, l)
		}
		text := strings.TrimSpace(strings.Join(body, "\n"))
		if text == "" {
			text = "(the executor asked for a design change without saying which)"
		}
		return truncate(text, 16384)
	}
	return ""
}

// isDCRStart reports whether line opens a request block: the marker alone on its line, perhaps
// as a heading, bold, or followed by ':'.
func isDCRStart(line string) bool {
	s := strings.TrimSpace(line)
	s = strings.TrimLeft(s, "#*> ")
	s = strings.TrimRight(s, "*: ")
	return strings.EqualFold(s, dcrMarker)
}
