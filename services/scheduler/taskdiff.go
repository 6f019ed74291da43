package scheduler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/gitexec"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// GetTaskDiff: the diff of a task's commit, read from the run's repository with git (the third
// place the Scheduler reads a repository, after the base ref and Verify Done's checkout). A local
// repository is read in place; any other is fetched (the task's ref, two commits deep) into a
// scratch repository under the work dir, removed after. A commit never changes, so answers are
// cached by repository and commit.

const (
	// defaultDiffBytes is the unified diff answered when the request sets no max_bytes.
	defaultDiffBytes = 1 << 20
	// maxDiffFiles bounds the files of one answer.
	maxDiffFiles = 1000
	// diffConcurrency bounds the diffs computed at once (each runs git, maybe a fetch).
	diffConcurrency = 4
	// diffCacheSize bounds the cached answers.
	diffCacheSize = 64
	// taskDiffDir is the work dir's folder of scratch repositories of fetched commits.
	taskDiffDir = "task-diffs"
)

// commitID is a full SHA-1 or SHA-256 commit id (what CompleteTask accepts).
var commitID = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

// diffs bounds and caches the diffs a Scheduler computes.
type diffs struct {
	once  sync.Once
	slots chan struct{}
	mu    sync.Mutex
	cache map[string]*schedulerv1.GetTaskDiffResponse // repository + commit + max bytes → answer
}

func (d *diffs) init() {
	d.once.Do(func() {
		d.slots = make(chan struct{}, diffConcurrency)
		d.cache = map[string]*schedulerv1.GetTaskDiffResponse{}
	})
}

func (d *diffs) get(key string) *schedulerv1.GetTaskDiffResponse {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r, ok := d.cache[key]; ok {
		return proto.Clone(r).(*schedulerv1.GetTaskDiffResponse)
	}
	return nil
}

func (d *diffs) put(key string, r *schedulerv1.GetTaskDiffResponse) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.cache) >= diffCacheSize {
		clear(d.cache)
	}
	d.cache[key] = proto.Clone(r).(*schedulerv1.GetTaskDiffResponse)
}

// GetTaskDiff answers the files and the unified diff of a task's commit.
func (s *Server) GetTaskDiff(ctx context.Context, req *schedulerv1.GetTaskDiffRequest) (*schedulerv1.GetTaskDiffResponse, error) {
	e, err := s.store.Execution(ctx, req.GetExecutionId())
	if err != nil {
		return nil, toStatus(err)
	}
	tl, idx, err := s.taskList(ctx, e.GetTaskListId())
	if err != nil {
		return nil, toStatus(err)
	}
	task := req.GetTaskId()
	if _, ok := idx[task]; !ok {
		return nil, toStatus(fmt.Errorf("task %s in task list %s: %w", task, tl.ID, store.ErrNotFound))
	}
	rows, _, err := s.store.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: e.GetId(), TaskID: task, PageSize: 1000})
	if err != nil {
		return nil, toStatus(err)
	}
	var a *schedulerv1.Assignment
	for _, r := range rows {
		switch {
		case req.GetAssignmentId() != "":
			if r.Assignment.GetId() == req.GetAssignmentId() {
				a = r.Assignment
			}
		case r.Assignment.GetCommitSha() != "":
			a = r.Assignment // rows run by wave: the last one with a commit is the newest
		}
	}
	switch {
	case req.GetAssignmentId() != "" && a == nil:
		return nil, toStatus(fmt.Errorf("assignment %s of task %s in execution %s: %w", req.GetAssignmentId(), task, e.GetId(), store.ErrNotFound))
	case a == nil || a.GetCommitSha() == "":
		return nil, toStatus(failedPrecondition("task %s of execution %s has no commit yet: a task has one once an agent completed it "+
			"(a check-only task, which declares no files, never has one); see its status with ListAssignments", task, e.GetId()))
	case e.GetRepository() == nil:
		return nil, toStatus(failedPrecondition("execution %s runs in no repository: its tasks' commits cannot be read", e.GetId()))
	case !commitID.MatchString(a.GetCommitSha()):
		return nil, toStatus(failedPrecondition("task %s of execution %s has no readable commit id", task, e.GetId()))
	}
	limit := int(req.GetMaxBytes())
	if limit == 0 {
		limit = defaultDiffBytes
	}
	s.diffs.init()
	key := repoSource(e.GetRepository()) + "\x00" + a.GetCommitSha() + "\x00" + strconv.Itoa(limit)
	res := s.diffs.get(key)
	if res == nil {
		select {
		case s.diffs.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, toStatus(ctx.Err())
		}
		res, err = s.commitDiff(ctx, e.GetRepository(), a, limit)
		<-s.diffs.slots
		if err != nil {
			return nil, toStatus(err)
		}
		s.diffs.put(key, res)
	}
	res.AssignmentId, res.WaveNumber, res.TaskRef = a.GetId(), a.GetWaveNumber(), a.GetTaskRef()
	return res, nil
}

// repoUnavailable is a repository git could not read: Unavailable, with git's reason.
func repoUnavailable(err error) error {
	msg := err.Error()
	var ge *gitexec.Error
	if errors.As(err, &ge) {
		msg = ge.Reason()
	}
	return &stateError{code: codes.Unavailable, msg: "the run's repository cannot be read: " + msg}
}

// commitDiff reads the assignment's commit in repo (fetching it first when repo is not local).
func (s *Server) commitDiff(ctx context.Context, repo *schedulerv1.Repository, a *schedulerv1.Assignment, limit int) (*schedulerv1.GetTaskDiffResponse, error) {
	sha := a.GetCommitSha()
	dir := repo.GetPath()
	if dir == "" {
		root := s.workDir
		if root == "" {
			root = os.TempDir()
		}
		root = filepath.Join(root, taskDiffDir)
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil, err
		}
		tmp, err := os.MkdirTemp(root, "fetch-")
		if err != nil {
			return nil, err
		}
		defer func() { _ = os.RemoveAll(tmp) }()
		if err := fetchCommit(ctx, tmp, repo.GetUrl(), a.GetTaskRef(), sha); err != nil {
			return nil, err
		}
		dir = tmp
	}
	return readDiff(ctx, dir, sha, limit)
}

// fetchCommit makes a bare repository in dir holding sha and its parent, fetched from url: the
// task's ref when it still points there, else the commit by id (servers that allow it).
func fetchCommit(ctx context.Context, dir, url, ref, sha string) error {
	cmd := func(args ...string) error {
		_, err := gitexec.Cmd{Dir: dir, Args: args, Timeout: gitTimeout}.Run(ctx)
		return err
	}
	if err := cmd("init", "--quiet", "--bare"); err != nil {
		return repoUnavailable(err)
	}
	var last error
	for _, want := range []string{ref, sha} {
		if want == "" {
			continue
		}
		if err := cmd("fetch", "--quiet", "--no-tags", "--depth=2", "--", url, want); err != nil {
			last = err
			continue
		}
		if cmd("cat-file", "-e", sha+"^{commit}") == nil {
			return nil
		}
	}
	if last != nil {
		return repoUnavailable(last)
	}
	return failedPrecondition("commit %s is no longer in the run's repository (its ref moved or was deleted)", sha)
}

// readDiff reads commit sha of the repository in dir: its parent and subject, the files it
// changed, and at most limit bytes of unified diff.
func readDiff(ctx context.Context, dir, sha string, limit int) (*schedulerv1.GetTaskDiffResponse, error) {
	run := func(args []string, max int) (string, error) {
		return gitexec.Cmd{Dir: dir, Args: args, Timeout: gitTimeout, MaxOutput: max}.Run(ctx)
	}
	if _, err := run([]string{"cat-file", "-e", sha + "^{commit}"}, 0); err != nil {
		var ge *gitexec.Error
		if errors.As(err, &ge) && ge.ExitCode > 0 {
			return nil, failedPrecondition("commit %s is not in the run's repository (was its ref deleted?)", sha)
		}
		return nil, repoUnavailable(err)
	}
	head, err := run([]string{"show", "--no-patch", "--no-show-signature", "--format=%P%n%s", sha}, 64<<10)
	if err != nil {
		return nil, repoUnavailable(err)
	}
	parents, subject, _ := strings.Cut(head, "\n")
	res := &schedulerv1.GetTaskDiffResponse{CommitSha: sha, Subject: strings.ToValidUTF8(strings.TrimRight(subject, "\n"), "\uFFFD")}
	// diff-tree of the commit against its first parent (the empty tree for a root commit).
	pair := []string{"--root", sha}
	if f := strings.Fields(parents); len(f) > 0 {
		res.ParentSha = f[0]
		pair = []string{f[0], sha}
	}
	diff := func(args ...string) []string {
		return append(append([]string{"diff-tree", "-r", "--no-commit-id", "--no-renames", "--no-ext-diff", "--no-textconv", "--no-color"}, args...), pair...)
	}
	status, err := run(diff("-z", "--name-status"), 0)
	if err != nil {
		return nil, repoUnavailable(err)
	}
	numstat, err := run(diff("-z", "--numstat"), 0)
	if err != nil {
		return nil, repoUnavailable(err)
	}
	res.Files, res.Truncated = commitFiles(status, numstat)
	for _, f := range res.Files {
		res.Additions += f.GetAdditions()
		res.Deletions += f.GetDeletions()
	}
	patch, err := run(diff("-p", "--src-prefix=a/", "--dst-prefix=b/"), limit)
	if err != nil {
		if !errors.Is(err, gitexec.ErrOutputTooLarge) {
			return nil, repoUnavailable(err)
		}
		res.Truncated = true
		if i := strings.LastIndexByte(patch, '\n'); i >= 0 {
			patch = patch[:i+1]
		} else {
			patch = ""
		}
	}
	res.UnifiedDiff = strings.ToValidUTF8(patch, "\uFFFD")
	return res, nil
}

// commitFiles joins diff-tree's -z --name-status ("M\0path\0"…) and -z --numstat
// ("added\tdeleted\tpath\0"…, "-\t-" for a binary file) outputs, at most maxDiffFiles files.
func commitFiles(status, numstat string) ([]*schedulerv1.FileChange, bool) {
	type counts struct {
		add, del int32
		binary   bool
	}
	byPath := map[string]counts{}
	for _, rec := range strings.Split(numstat, "\x00") {
		f := strings.SplitN(rec, "\t", 3)
		if len(f) != 3 {
			continue
		}
		add, errA := strconv.ParseInt(f[0], 10, 32)
		del, errD := strconv.ParseInt(f[1], 10, 32)
		byPath[f[2]] = counts{add: int32(add), del: int32(del), binary: errA != nil || errD != nil}
	}
	kinds := map[string]schedulerv1.FileChangeStatus{
		"A": schedulerv1.FileChangeStatus_FILE_CHANGE_STATUS_ADDED, "M": schedulerv1.FileChangeStatus_FILE_CHANGE_STATUS_MODIFIED,
		"D": schedulerv1.FileChangeStatus_FILE_CHANGE_STATUS_DELETED, "T": schedulerv1.FileChangeStatus_FILE_CHANGE_STATUS_TYPE_CHANGED,
	}
	fields := strings.Split(strings.TrimSuffix(status, "\x00"), "\x00")
	var files []*schedulerv1.FileChange
	for i := 0; i+1 < len(fields); i += 2 {
		if len(files) == maxDiffFiles {
			return files, true
		}
		p := fields[i+1]
		c := byPath[p]
		files = append(files, &schedulerv1.FileChange{Path: strings.ToValidUTF8(p, "\uFFFD"), Status: kinds[fields[i]],
			Additions: c.add, Deletions: c.del, Binary: c.binary})
	}
	return files, false
}
