package scheduler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"

	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/ids"
	"github.com/converge-dev/converge/platform/pagetoken"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/tasklist"
)

// Page sizes of ListTaskLists.
const defaultPageSize = 100

// CreateTaskList checks a list given inline as a whole and stores it.
func (s *Server) CreateTaskList(ctx context.Context, req *schedulerv1.CreateTaskListRequest) (*schedulerv1.CreateTaskListResponse, error) {
	spec := req.GetSpec()
	bad := &badRequest{request: "CreateTaskListRequest"}
	for _, v := range tasklist.Validate(spec) {
		bad.add("spec."+v.Field, v.Description)
	}
	if err := bad.orNil(); err != nil {
		return nil, toStatus(err)
	}
	if req.GetValidateOnly() {
		return &schedulerv1.CreateTaskListResponse{TaskList: unstored(spec, nil)}, nil
	}
	id := req.GetTaskListId()
	if id == "" {
		id = ids.New("tl", s.now())
	}
	tl, err := s.store.CreateTaskList(ctx, id, spec, nil)
	if err != nil {
		return nil, toStatus(err)
	}
	s.preparedList(tl) // its paths interned now, not when it is planned (planlists.go)
	return &schedulerv1.CreateTaskListResponse{TaskList: taskListProto(tl)}, nil
}

// ImportTaskList parses a document, completes it with the request's base, checks it like
// CreateTaskList (plus the proto's own rules, which the request's validation did not see: the
// document's tasks were still bytes) and stores it. Violations of an imported list are on
// "content" and name the document's line.
func (s *Server) ImportTaskList(ctx context.Context, req *schedulerv1.ImportTaskListRequest) (*schedulerv1.ImportTaskListResponse, error) {
	bad := &badRequest{request: "ImportTaskListRequest"}
	if req.GetWriteBack() && req.GetFormat() != schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD {
		bad.add("write_back", "status write-back is supported for tasks.md (IMPORT_FORMAT_TASKS_MD) only")
		return nil, toStatus(bad)
	}
	doc, err := tasklist.Parse(req.GetFormat(), req.GetContent())
	if err != nil {
		var perr *tasklist.ParseError
		if !errors.As(err, &perr) {
			return nil, toStatus(err)
		}
		bad.add("content", perr.Error())
		return nil, toStatus(bad)
	}
	spec := withBase(doc.Spec, req.GetBase(), req.GetSourcePath())
	if spec.GetName() == "" {
		bad.add("content", `the list has no name: give base.name, a "# " title or name field in the document, or source_path`)
	}
	line := func(task int) string {
		if task >= 0 && task < len(doc.TaskLines) && doc.TaskLines[task] > 0 {
			return "line " + strconv.Itoa(doc.TaskLines[task]) + ": "
		}
		return ""
	}
	if err := protovalidate.Validate(spec); err != nil {
		var verr *protovalidate.ValidationError
		if !errors.As(err, &verr) {
			return nil, toStatus(fmt.Errorf("validate imported list: %w", err))
		}
		for _, v := range verr.Violations {
			field := protovalidate.FieldPathString(v.Proto.GetField())
			bad.add("content", line(taskOf(field))+field+": "+v.Proto.GetMessage())
		}
	}
	if err := bad.orNil(); err != nil {
		return nil, toStatus(err) // the whole-list checks assume the fields are well formed
	}
	for _, v := range tasklist.Validate(spec) {
		bad.add("content", line(v.Task)+v.Field+": "+v.Description)
	}
	if err := bad.orNil(); err != nil {
		return nil, toStatus(err)
	}

	sum := sha256.Sum256(req.GetContent())
	source := &schedulerv1.ImportSource{
		Format:        req.GetFormat(),
		Path:          req.GetSourcePath(),
		WriteBack:     req.GetWriteBack(),
		ContentSha256: hex.EncodeToString(sum[:]),
	}
	res := &schedulerv1.ImportTaskListResponse{}
	for _, w := range doc.Warnings {
		res.Warnings = append(res.Warnings, &schedulerv1.ImportWarning{Line: int32(w.Line), Message: w.Message})
	}
	if req.GetValidateOnly() {
		res.TaskList = unstored(spec, source)
		return res, nil
	}
	id := req.GetTaskListId()
	if id == "" {
		id = ids.New("tl", s.now())
	}
	tl, err := s.store.CreateTaskList(ctx, id, spec, source)
	if err != nil {
		return nil, toStatus(err)
	}
	s.preparedList(tl) // its paths interned now, not when it is planned (planlists.go)
	res.TaskList = taskListProto(tl)
	return res, nil
}

// taskField finds the task a field path is about: "tasks[3].id" → 3.
var taskField = regexp.MustCompile(`^tasks\[(\d+)\]`)

// taskOf is the index of the task a field path is about, or -1.
func taskOf(field string) int {
	if m := taskField.FindStringSubmatch(field); m != nil {
		if i, err := strconv.Atoi(m[1]); err == nil {
			return i
		}
	}
	return -1
}

// withBase completes an imported spec with what the request's base gives (it wins where set),
// the tasks file with the source path, and the name with the source file's name as a last resort.
func withBase(doc, base *schedulerv1.TaskListSpec, sourcePath string) *schedulerv1.TaskListSpec {
	spec := proto.CloneOf(doc)
	if base.GetName() != "" {
		spec.Name = base.GetName()
	}
	if base.GetDescription() != "" {
		spec.Description = base.GetDescription()
	}
	if base.GetRepository() != nil {
		spec.Repository = base.GetRepository()
	}
	if base.GetContext() != nil {
		spec.Context = base.GetContext()
	}
	if base.GetValidation() != nil {
		spec.Validation = base.GetValidation()
	}
	if base.GetDoneCriteria() != "" {
		spec.DoneCriteria = base.GetDoneCriteria()
	}
	if sourcePath != "" && spec.GetContext().GetTasksFile() == "" {
		if spec.Context == nil {
			spec.Context = &schedulerv1.ProjectContext{}
		} else {
			spec.Context = proto.CloneOf(spec.Context)
		}
		spec.Context.TasksFile = sourcePath
	}
	if spec.GetName() == "" && sourcePath != "" {
		spec.Name = path.Base(sourcePath)
	}
	return spec
}

// GetTaskList returns one task list (FULL unless asked otherwise).
func (s *Server) GetTaskList(ctx context.Context, req *schedulerv1.GetTaskListRequest) (*schedulerv1.GetTaskListResponse, error) {
	view := store.ViewFull
	if req.GetView() == schedulerv1.TaskListView_TASK_LIST_VIEW_BASIC {
		view = store.ViewBasic
	}
	tl, err := s.store.GetTaskList(ctx, req.GetTaskListId(), view)
	if err != nil {
		return nil, toStatus(err)
	}
	return &schedulerv1.GetTaskListResponse{TaskList: taskListProto(tl)}, nil
}

// ListTaskLists returns a page of task lists, newest first (BASIC unless asked otherwise).
func (s *Server) ListTaskLists(ctx context.Context, req *schedulerv1.ListTaskListsRequest) (*schedulerv1.ListTaskListsResponse, error) {
	var after store.Cursor
	ok, err := pagetoken.Decode(req.GetPageToken(), req, &after)
	if err != nil {
		return nil, err
	}
	q := store.ListTaskListsQuery{
		PageSize:     int(req.GetPageSize()),
		NameContains: req.GetNameContains(),
		View:         store.ViewBasic,
	}
	if ok {
		q.After = &after
	}
	if q.PageSize == 0 {
		q.PageSize = defaultPageSize
	}
	if req.GetView() == schedulerv1.TaskListView_TASK_LIST_VIEW_FULL {
		q.View = store.ViewFull
	}
	lists, next, err := s.store.ListTaskLists(ctx, q)
	if err != nil {
		return nil, toStatus(err)
	}
	res := &schedulerv1.ListTaskListsResponse{}
	if next != nil {
		res.NextPageToken = pagetoken.Encode(req, next)
	}
	for _, tl := range lists {
		res.TaskLists = append(res.TaskLists, taskListProto(tl))
	}
	return res, nil
}

// DeleteTaskList deletes a task list and everything hanging off it.
func (s *Server) DeleteTaskList(ctx context.Context, req *schedulerv1.DeleteTaskListRequest) (*schedulerv1.DeleteTaskListResponse, error) {
	if err := s.store.DeleteTaskList(ctx, req.GetTaskListId()); err != nil {
		return nil, toStatus(err)
	}
	s.forgetList(req.GetTaskListId())
	return &schedulerv1.DeleteTaskListResponse{}, nil
}

// taskListProto is the API form of a stored task list.
func taskListProto(tl *store.TaskList) *schedulerv1.TaskList {
	return &schedulerv1.TaskList{
		Id:                 tl.ID,
		Spec:               tl.Spec,
		TaskCount:          tl.TaskCount,
		CompletedTaskCount: tl.CompletedTaskCount,
		Source:             tl.Source,
		LatestExecutionId:  tl.LatestExecutionID,
		RunCount:           tl.RunCount,
		CreateTime:         timestamppb.New(tl.CreateTime),
		UpdateTime:         timestamppb.New(tl.UpdateTime),
	}
}

// unstored is the API form of a list checked but not stored (validate_only): no id, no times.
func unstored(spec *schedulerv1.TaskListSpec, source *schedulerv1.ImportSource) *schedulerv1.TaskList {
	tl := &schedulerv1.TaskList{Spec: spec, TaskCount: int32(len(spec.GetTasks())), Source: source}
	for _, t := range spec.GetTasks() {
		if t.GetStatus() == commonv1.TaskStatus_TASK_STATUS_COMPLETED {
			tl.CompletedTaskCount++
		}
	}
	return tl
}
