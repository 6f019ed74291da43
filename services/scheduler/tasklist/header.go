package tasklist

import (
	"strings"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// The header of a tasks.md or an execution plan: field lines after the "# " title and before the
// first "## " heading name the project context the agent's Prime step loads (issue 15 part 1):
//
//	**Spec:** `specs/auth/design.md`                       (also **Design:**) → context.spec_file
//	**Conventions:** `AGENTS.md` (API Conventions), `CLAUDE.md`   → context.conventions (path and sections)
//	**Context files:** `README.md`, `docs/problem.md`      (also **Idea context:**) → context.context_files
//
// Paths are repository-relative (Validate checks them); "none" leaves the field empty.

// headerField reads one header line into spec's context; it reports whether the line was one.
func headerField(spec *schedulerv1.TaskListSpec, l mdLine) bool {
	if l.fenced {
		return false
	}
	m := fieldLine.FindStringSubmatch(l.text)
	if m == nil {
		return false
	}
	value := strings.TrimSpace(m[2])
	ctx := func() *schedulerv1.ProjectContext {
		if spec.Context == nil {
			spec.Context = &schedulerv1.ProjectContext{}
		}
		return spec.Context
	}
	switch strings.ToLower(strings.TrimSpace(m[1])) {
	case "spec", "spec file", "design":
		if !isNone(value) {
			ctx().SpecFile = stripMarkup(value)
		}
	case "conventions", "conventions source", "conventions sources":
		for _, item := range listOrNone(value) {
			path, sections := item, ""
			if i := strings.IndexByte(item, '('); i > 0 && strings.HasSuffix(item, ")") {
				path, sections = item[:i], item[i+1:len(item)-1]
			}
			src := &schedulerv1.ConventionsSource{Path: stripMarkup(path)}
			for _, s := range splitList(sections) {
				src.Sections = append(src.Sections, stripMarkup(s))
			}
			ctx().Conventions = append(ctx().Conventions, src)
		}
	case "context files", "idea context", "project context":
		for _, item := range listOrNone(value) {
			ctx().ContextFiles = append(ctx().ContextFiles, stripMarkup(item))
		}
	default:
		return false
	}
	return true
}

// listOrNone splits a comma-separated header value; "none" is no item.
func listOrNone(value string) []string {
	if isNone(value) {
		return nil
	}
	return splitList(value)
}
