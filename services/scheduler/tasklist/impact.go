package tasklist

import (
	"strings"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	"github.com/converge-dev/converge/platform/repopath"
)

// Impact is one path a task touches, resolved: its kind and operation are never UNSPECIFIED.
// Impacts are what the wave planner compares and what the store keeps in task_file_impacts.
type Impact struct {
	// Path as written: repository-relative, "/" separators; a DIRECTORY may end with "/".
	Path string
	// Kind is FILE, GLOB or DIRECTORY.
	Kind commonv1.FileImpactKind
	// Operation is CREATE, UPDATE, DELETE or READ. Only READ is not a write.
	Operation commonv1.FileOperation
	// Inferred is set for the impact that comes from the task's main file when its files do not
	// list it; declared impacts come from the task's files.
	Inferred bool
}

// Writes reports whether the impact changes its path (anything but READ).
func (i Impact) Writes() bool { return i.Operation != commonv1.FileOperation_FILE_OPERATION_READ }

// Node is the path with a directory's trailing "/" removed: the tree node the impact is at.
func (i Impact) Node() string { return strings.TrimSuffix(i.Path, "/") }

// InferKind is the kind of a path whose kind is not given: a path with glob metacharacters
// (* ? [ {) is a GLOB, one ending in "/" a DIRECTORY, anything else a FILE.
func InferKind(path string) commonv1.FileImpactKind {
	switch {
	case repopath.IsGlob(path):
		return commonv1.FileImpactKind_FILE_IMPACT_KIND_GLOB
	case strings.HasSuffix(path, "/"):
		return commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY
	default:
		return commonv1.FileImpactKind_FILE_IMPACT_KIND_FILE
	}
}

// ResolveKind is kind, or the kind inferred from path when kind is UNSPECIFIED.
func ResolveKind(path string, kind commonv1.FileImpactKind) commonv1.FileImpactKind {
	if kind == commonv1.FileImpactKind_FILE_IMPACT_KIND_UNSPECIFIED {
		return InferKind(path)
	}
	return kind
}

// mainFileOperation is what a task's action does to its main file.
func mainFileOperation(action commonv1.TaskAction) commonv1.FileOperation {
	switch action {
	case commonv1.TaskAction_TASK_ACTION_CREATE:
		return commonv1.FileOperation_FILE_OPERATION_CREATE
	case commonv1.TaskAction_TASK_ACTION_DELETE:
		return commonv1.FileOperation_FILE_OPERATION_DELETE
	default:
		return commonv1.FileOperation_FILE_OPERATION_UPDATE
	}
}

// Impacts returns the resolved file impacts of t, in order: its declared files (kind inferred
// where unset, operation UPDATE where unset), then its main file when the files do not list it as
// a FILE (operation from the action: CREATE, DELETE, else UPDATE). A path listed twice with the
// same kind is one impact; a write wins over a read.
func Impacts(t *commonv1.Task) []Impact {
	out := make([]Impact, 0, len(t.GetFiles())+1)
	seen := make(map[impactKey]int, len(t.GetFiles())+1)
	add := func(im Impact) {
		k := impactKey{im.Kind, im.Path}
		if i, ok := seen[k]; ok {
			if !out[i].Writes() && im.Writes() {
				out[i].Operation = im.Operation
			}
			return
		}
		seen[k] = len(out)
		out = append(out, im)
	}
	for _, f := range t.GetFiles() {
		op := f.GetOperation()
		if op == commonv1.FileOperation_FILE_OPERATION_UNSPECIFIED {
			op = commonv1.FileOperation_FILE_OPERATION_UPDATE
		}
		add(Impact{Path: f.GetPath(), Kind: ResolveKind(f.GetPath(), f.GetKind()), Operation: op})
	}
	if file := t.GetFile(); file != "" {
		if _, listed := seen[impactKey{commonv1.FileImpactKind_FILE_IMPACT_KIND_FILE, file}]; !listed {
			add(Impact{
				Path:      file,
				Kind:      commonv1.FileImpactKind_FILE_IMPACT_KIND_FILE,
				Operation: mainFileOperation(t.GetAction()),
				Inferred:  true,
			})
		}
	}
	return out
}

type impactKey struct {
	kind commonv1.FileImpactKind
	path string
}

// CheckPath says what is wrong with a repository-relative path of the given kind (resolved, not
// UNSPECIFIED), or "" when it is safe: platform/repopath's rules for the kind — a FILE is a valid
// path, a GLOB a valid glob, a DIRECTORY a valid path that may end with one "/". The kinds are the
// Scheduler's own; the rules are repopath's, the same in every service. Symbolic links inside the
// repository are checked by the agents, which see the files.
func CheckPath(path string, kind commonv1.FileImpactKind) string {
	var err error
	switch kind {
	case commonv1.FileImpactKind_FILE_IMPACT_KIND_GLOB:
		err = repopath.ValidateGlob(path)
	case commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY:
		err = repopath.ValidateDir(path)
	default:
		err = repopath.Validate(path)
	}
	if err != nil {
		return err.Error()
	}
	return ""
}
