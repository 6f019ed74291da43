package store

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/tasklist"
)

// This file turns task lists into rows and back, the same way for every SQL backend: JSON columns
// are JSON text, nullable columns are pointers, booleans and times are left to the backend.

// TaskListRow is the task_lists row of a list (without the times, which the store sets).
type TaskListRow struct {
	ID, Name, NameFolded, Description, SourceFormat string
	SourcePath, RepositoryURL, RepositoryPath       *string
	BaseRef, SpecFile, TasksFile                    *string
	ConventionsFiles, ContextFiles                  string // JSON arrays
	ValidationLevels                                string // JSON array
	DoneCriteria                                    string
	Metadata                                        string // JSON object
}

// TaskRow is the tasks row of one task (without its list, surrogate id and times).
type TaskRow struct {
	Key, Title, Description, Action string
	ActionDeclared                  bool
	File                            *string
	Files, DependsOn                string // JSON arrays
	Phase                           string
	Priority                        int32
	Requirements, Steps             string // JSON arrays
	Command, CodeTemplate           *string
	ValidationCommand               *string
	ValidationExpected              *string
	ValidationExpectedExitCode      int32
	ValidationTimeoutMS             *int64
	Position                        int32
	Status                          string
	RequiresSignoff                 bool
}

// ImpactRow is one task_file_impacts row of a task.
type ImpactRow struct {
	Path, Kind, Operation, Source string
}

// metadata is what task_lists.metadata holds.
type metadata struct {
	WriteBack     bool   `json:"writeBack,omitempty"`
	ContentSHA256 string `json:"contentSha256,omitempty"`
}

// convention is one entry of task_lists.conventions_files.
type convention struct {
	Path     string   `json:"path"`
	Sections []string `json:"sections,omitempty"`
}

// Source formats of task_lists.source_format, by import format.
var sourceFormats = map[schedulerv1.ImportFormat]string{
	schedulerv1.ImportFormat_IMPORT_FORMAT_JSON:           "json",
	schedulerv1.ImportFormat_IMPORT_FORMAT_YAML:           "yaml",
	schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD:       "tasks_md",
	schedulerv1.ImportFormat_IMPORT_FORMAT_EXECUTION_PLAN: "execution_plan",
}

// Validation levels of task_lists.validation_levels.
var levelNames = []string{"codebase", "api", "ui"}

// EncodeTaskList returns the rows of a task list: the list, its tasks in order, and each task's
// file impacts.
func EncodeTaskList(id string, spec *schedulerv1.TaskListSpec, source *schedulerv1.ImportSource) (TaskListRow, []TaskRow, [][]ImpactRow, error) {
	row := TaskListRow{
		ID:           id,
		Name:         spec.GetName(),
		NameFolded:   strings.ToLower(spec.GetName()),
		Description:  spec.GetDescription(),
		SourceFormat: "inline",
		DoneCriteria: spec.GetDoneCriteria(),
	}
	md := metadata{}
	if source != nil {
		f, ok := sourceFormats[source.GetFormat()]
		if !ok {
			return row, nil, nil, fmt.Errorf("store: import format %v", source.GetFormat())
		}
		row.SourceFormat = f
		row.SourcePath = nullable(source.GetPath())
		md.WriteBack, md.ContentSHA256 = source.GetWriteBack(), source.GetContentSha256()
	}
	if repo := spec.GetRepository(); repo != nil {
		row.RepositoryURL, row.RepositoryPath = nullable(repo.GetUrl()), nullable(repo.GetPath())
		row.BaseRef = nullable(repo.GetBaseRef())
	}
	ctx := spec.GetContext()
	row.SpecFile, row.TasksFile = nullable(ctx.GetSpecFile()), nullable(ctx.GetTasksFile())
	convs := make([]convention, 0, len(ctx.GetConventions()))
	for _, c := range ctx.GetConventions() {
		convs = append(convs, convention{Path: c.GetPath(), Sections: c.GetSections()})
	}
	var err error
	if row.ConventionsFiles, err = jsonText(convs); err != nil {
		return row, nil, nil, err
	}
	if row.ContextFiles, err = jsonText(nonNil(ctx.GetContextFiles())); err != nil {
		return row, nil, nil, err
	}
	if row.ValidationLevels, err = encodeLevels(spec.GetValidation()); err != nil {
		return row, nil, nil, err
	}
	if row.Metadata, err = jsonText(md); err != nil {
		return row, nil, nil, err
	}

	tasks := make([]TaskRow, len(spec.GetTasks()))
	impacts := make([][]ImpactRow, len(spec.GetTasks()))
	for i, t := range spec.GetTasks() {
		if tasks[i], err = encodeTask(t, int32(i)); err != nil {
			return row, nil, nil, err
		}
		for _, im := range tasklist.Impacts(t) {
			source := "declared"
			if im.Inferred {
				source = "inferred"
			}
			impacts[i] = append(impacts[i], ImpactRow{
				Path:      im.Path,
				Kind:      strings.ToLower(strings.TrimPrefix(im.Kind.String(), "FILE_IMPACT_KIND_")),
				Operation: strings.ToLower(strings.TrimPrefix(im.Operation.String(), "FILE_OPERATION_")),
				Source:    source,
			})
		}
	}
	return row, tasks, impacts, nil
}

func encodeTask(t *commonv1.Task, position int32) (TaskRow, error) {
	r := TaskRow{
		Key:            t.GetId(),
		Title:          t.GetTitle(),
		Description:    t.GetDescription(),
		Action:         "CREATE", // the column's default, for an action not given
		ActionDeclared: t.GetAction() != commonv1.TaskAction_TASK_ACTION_UNSPECIFIED,
		File:           nullable(t.GetFile()),
		Phase:          t.GetPhase(),
		Priority:       t.GetPriority(),
		Command:        nullable(t.GetCommand()),
		CodeTemplate:   nullable(t.GetCodeTemplate()),
		Position:       position,
		Status:         statusName(t.GetStatus()),
		// Only gates set it (tasklist.Validate).
		RequiresSignoff: t.GetRequiresSignoff(),
	}
	if r.ActionDeclared {
		r.Action = strings.TrimPrefix(t.GetAction().String(), "TASK_ACTION_")
	}
	files := make([]json.RawMessage, len(t.GetFiles()))
	for i, f := range t.GetFiles() {
		b, err := protojson.Marshal(f)
		if err != nil {
			return r, fmt.Errorf("store: task %q: file %d: %w", t.GetId(), i, err)
		}
		files[i] = b
	}
	var err error
	if r.Files, err = jsonText(files); err != nil {
		return r, err
	}
	if r.DependsOn, err = jsonText(nonNil(t.GetDependsOn())); err != nil {
		return r, err
	}
	if r.Requirements, err = jsonText(nonNil(t.GetRequirements())); err != nil {
		return r, err
	}
	if r.Steps, err = jsonText(nonNil(t.GetSteps())); err != nil {
		return r, err
	}
	if v := t.GetValidation(); v != nil {
		cmd := v.GetCommand()
		r.ValidationCommand = &cmd // set, possibly empty: the task has a validation
		r.ValidationExpected = nullable(v.GetExpected())
		r.ValidationExpectedExitCode = v.GetExpectedExitCode()
		if v.GetTimeout() != nil {
			ms := v.GetTimeout().AsDuration().Milliseconds()
			r.ValidationTimeoutMS = &ms
		}
	}
	return r, nil
}

// DecodeTaskList builds a stored task list from its rows. tasks are in position order; nil
// tasks (a BASIC read) leave the spec without tasks.
func DecodeTaskList(row TaskListRow, tasks []TaskRow) (*TaskList, error) {
	spec := &schedulerv1.TaskListSpec{
		Name:         row.Name,
		Description:  row.Description,
		DoneCriteria: row.DoneCriteria,
	}
	if row.RepositoryURL != nil || row.RepositoryPath != nil {
		repo := &schedulerv1.Repository{BaseRef: deref(row.BaseRef)}
		if row.RepositoryURL != nil {
			repo.Source = &schedulerv1.Repository_Url{Url: *row.RepositoryURL}
		} else {
			repo.Source = &schedulerv1.Repository_Path{Path: *row.RepositoryPath}
		}
		spec.Repository = repo
	}
	ctx := &schedulerv1.ProjectContext{SpecFile: deref(row.SpecFile), TasksFile: deref(row.TasksFile)}
	var convs []json.RawMessage
	if err := json.Unmarshal([]byte(row.ConventionsFiles), &convs); err != nil {
		return nil, fmt.Errorf("store: task list %q: conventions_files: %w", row.ID, err)
	}
	for _, raw := range convs {
		var c convention
		if json.Unmarshal(raw, &c.Path) != nil { // a plain path, as other writers may store
			if err := json.Unmarshal(raw, &c); err != nil {
				return nil, fmt.Errorf("store: task list %q: conventions_files: %w", row.ID, err)
			}
		}
		ctx.Conventions = append(ctx.Conventions, &schedulerv1.ConventionsSource{Path: c.Path, Sections: c.Sections})
	}
	if err := json.Unmarshal([]byte(row.ContextFiles), &ctx.ContextFiles); err != nil {
		return nil, fmt.Errorf("store: task list %q: context_files: %w", row.ID, err)
	}
	if ctx.SpecFile != "" || ctx.TasksFile != "" || len(ctx.Conventions) > 0 || len(ctx.ContextFiles) > 0 {
		spec.Context = ctx
	}
	levels, err := decodeLevels(row.ValidationLevels)
	if err != nil {
		return nil, fmt.Errorf("store: task list %q: validation_levels: %w", row.ID, err)
	}
	spec.Validation = levels

	tl := &TaskList{ID: row.ID, Spec: spec}
	if row.SourceFormat != "inline" {
		var md metadata
		if err := json.Unmarshal([]byte(row.Metadata), &md); err != nil {
			return nil, fmt.Errorf("store: task list %q: metadata: %w", row.ID, err)
		}
		tl.Source = &schedulerv1.ImportSource{Path: deref(row.SourcePath), WriteBack: md.WriteBack, ContentSha256: md.ContentSHA256}
		for f, name := range sourceFormats {
			if name == row.SourceFormat {
				tl.Source.Format = f
			}
		}
	}
	for _, r := range tasks {
		t, err := decodeTask(r)
		if err != nil {
			return nil, fmt.Errorf("store: task list %q: %w", row.ID, err)
		}
		spec.Tasks = append(spec.Tasks, t)
	}
	return tl, nil
}

func decodeTask(r TaskRow) (*commonv1.Task, error) {
	t := &commonv1.Task{
		Id:              r.Key,
		Title:           r.Title,
		Description:     r.Description,
		File:            deref(r.File),
		Phase:           r.Phase,
		Priority:        r.Priority,
		Command:         deref(r.Command),
		CodeTemplate:    deref(r.CodeTemplate),
		Status:          statusOf(r.Status),
		RequiresSignoff: r.RequiresSignoff,
	}
	if r.ActionDeclared {
		t.Action = commonv1.TaskAction(commonv1.TaskAction_value["TASK_ACTION_"+r.Action])
	}
	var files []json.RawMessage
	if err := json.Unmarshal([]byte(r.Files), &files); err != nil {
		return nil, fmt.Errorf("task %q: files: %w", r.Key, err)
	}
	for _, raw := range files {
		f := &commonv1.FileImpact{}
		if err := protojson.Unmarshal(raw, f); err != nil {
			return nil, fmt.Errorf("task %q: files: %w", r.Key, err)
		}
		t.Files = append(t.Files, f)
	}
	for _, col := range []struct {
		name string
		text string
		into *[]string
	}{{"depends_on", r.DependsOn, &t.DependsOn}, {"requirements", r.Requirements, &t.Requirements}, {"steps", r.Steps, &t.Steps}} {
		if err := json.Unmarshal([]byte(col.text), col.into); err != nil {
			return nil, fmt.Errorf("task %q: %s: %w", r.Key, col.name, err)
		}
	}
	if r.ValidationCommand != nil {
		t.Validation = &commonv1.TaskValidation{
			Command:          *r.ValidationCommand,
			Expected:         deref(r.ValidationExpected),
			ExpectedExitCode: r.ValidationExpectedExitCode,
		}
		if r.ValidationTimeoutMS != nil {
			t.Validation.Timeout = durationpb.New(time.Duration(*r.ValidationTimeoutMS) * time.Millisecond)
		}
	}
	return t, nil
}

// level is one entry of task_lists.validation_levels: a level with a command or trigger globs.
type level struct {
	Level        string          `json:"level"`
	Validation   json.RawMessage `json:"validation,omitempty"` // a TaskValidation in protobuf JSON
	TriggerGlobs []string        `json:"triggerGlobs,omitempty"`
}

// encodeLevels writes the validation levels as [{"level": "codebase", "validation": {...},
// "triggerGlobs": [...]}, ...], one entry per level with a validation or trigger globs.
func encodeLevels(v *schedulerv1.ValidationLevels) (string, error) {
	entries := []level{}
	for i, l := range []struct {
		validation *commonv1.TaskValidation
		globs      []string
	}{{v.GetCodebase(), nil}, {v.GetApi(), v.GetApiTriggerGlobs()}, {v.GetUi(), v.GetUiTriggerGlobs()}} {
		if l.validation == nil && len(l.globs) == 0 {
			continue
		}
		entry := level{Level: levelNames[i], TriggerGlobs: l.globs}
		if l.validation != nil {
			b, err := protojson.Marshal(l.validation)
			if err != nil {
				return "", fmt.Errorf("store: encode %s validation: %w", levelNames[i], err)
			}
			entry.Validation = b
		}
		entries = append(entries, entry)
	}
	return jsonText(entries)
}

func decodeLevels(text string) (*schedulerv1.ValidationLevels, error) {
	var entries []level
	if err := json.Unmarshal([]byte(text), &entries); err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, nil
	}
	out := &schedulerv1.ValidationLevels{}
	for _, e := range entries {
		var validation *commonv1.TaskValidation
		if len(e.Validation) > 0 {
			validation = &commonv1.TaskValidation{}
			if err := protojson.Unmarshal(e.Validation, validation); err != nil {
				return nil, fmt.Errorf("%s: %w", e.Level, err)
			}
		}
		switch e.Level {
		case "codebase":
			out.Codebase = validation
		case "api":
			out.Api, out.ApiTriggerGlobs = validation, e.TriggerGlobs
		case "ui":
			out.Ui, out.UiTriggerGlobs = validation, e.TriggerGlobs
		default:
			return nil, fmt.Errorf("unknown level %q", e.Level)
		}
	}
	return out, nil
}

// statusName is the tasks.status value of a status.
func statusName(s commonv1.TaskStatus) string {
	if s == commonv1.TaskStatus_TASK_STATUS_UNSPECIFIED {
		s = commonv1.TaskStatus_TASK_STATUS_PENDING
	}
	return strings.ToLower(strings.TrimPrefix(s.String(), "TASK_STATUS_"))
}

func statusOf(name string) commonv1.TaskStatus {
	return commonv1.TaskStatus(commonv1.TaskStatus_value["TASK_STATUS_"+strings.ToUpper(name)])
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func jsonText(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("store: encode JSON: %w", err)
	}
	return string(b), nil
}

// CreatedTaskList is a list as CreateTaskList stored it, built from the rows it inserted and the
// store times the insert returned, as GetTaskList(ViewFull) would read it back: a new list has no
// runs, and its tasks are counted from its rows (issue 17, P1b: no read-back of the whole list
// in every run's start). Both backends answer CreateTaskList with it.
func CreatedTaskList(row TaskListRow, tasks []TaskRow, created, updated time.Time) (*TaskList, error) {
	tl, err := DecodeTaskList(row, tasks)
	if err != nil {
		return nil, err
	}
	tl.CreateTime, tl.UpdateTime = created.UTC(), updated.UTC()
	tl.TaskCount = int32(len(tasks))
	completed := statusName(commonv1.TaskStatus_TASK_STATUS_COMPLETED)
	for _, t := range tasks {
		if t.Status == completed {
			tl.CompletedTaskCount++
		}
	}
	return tl, nil
}
