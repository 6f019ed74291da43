package knowledge

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	"github.com/converge-dev/converge/platform/pagetoken"

	"github.com/converge-dev/converge/platform/repopath"
	"github.com/converge-dev/converge/services/knowledge/confidence"
	"github.com/converge-dev/converge/services/knowledge/store"
)

// This file checks requests against the service's rules and turns them into the store's terms.
// The proto's protovalidate rules, enforced by the server's interceptor, catch most bad input
// first; the checks here repeat the ones the store relies on, so that a handler called without
// the interceptor still never hands the store bad input, and add what protovalidate cannot say
// (a glob that does not parse, a path that normalises to nothing).

// Limits of a request.
const (
	maxContentBytes  = 16 << 10
	maxEvidenceBytes = 16 << 10
	maxTags          = 32
	maxTextChars     = 512
	defaultLimit     = 20
	maxLimit         = 500
	defaultPageSize  = 100
	maxPageSize      = 1000
)

// tagPattern is what a tag looks like: a lower-case word.
var tagPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// itemTypes maps the proto's item types to the store's.
var itemTypes = map[knowledgev1.ItemType]store.Type{
	knowledgev1.ItemType_ITEM_TYPE_GOTCHA:    store.TypeGotcha,
	knowledgev1.ItemType_ITEM_TYPE_PATTERN:   store.TypePattern,
	knowledgev1.ItemType_ITEM_TYPE_DECISION:  store.TypeDecision,
	knowledgev1.ItemType_ITEM_TYPE_DISCOVERY: store.TypeDiscovery,
}

// errTooBig is the reason an evidence or a reason is refused.
var errTooBig = fmt.Errorf("must be at most %d bytes", maxEvidenceBytes)

// errUnknownType is the reason an item type is refused.
var errUnknownType = errors.New("must be one of ITEM_TYPE_GOTCHA, ITEM_TYPE_PATTERN, ITEM_TYPE_DECISION, ITEM_TYPE_DISCOVERY")

// newItem checks a RecordItemRequest and returns the item to record.
func newItem(req *knowledgev1.RecordItemRequest) (store.NewItem, error) {
	bad := &badRequest{request: "RecordItemRequest"}
	it := store.NewItem{
		Content:    req.GetContent(),
		Tags:       req.GetTags(),
		Confidence: confidence.Default,
		Source: store.Source{
			ExecutionID: req.GetSource().GetExecutionId(),
			TaskID:      req.GetSource().GetTaskId(),
			AgentID:     req.GetSource().GetAgentId(),
		},
		Evidence: req.GetEvidence(),
		Project:  req.GetProject(),
	}
	checkProject(bad, "project", it.Project)
	var ok bool
	if it.Type, ok = itemTypes[req.GetType()]; !ok {
		bad.add("type", errUnknownType)
	}
	switch {
	case len(it.Content) > maxContentBytes:
		bad.addf("content", "must be at most %d bytes", maxContentBytes)
	case store.NormalizeContent(it.Content) == "":
		bad.addf("content", "must not be empty or only white space")
	}
	pattern, err := repopath.CleanGlob(req.GetFilePattern())
	if err != nil {
		bad.add("file_pattern", err)
	}
	it.FilePattern = pattern
	checkTags(bad, it.Tags, true)
	if req.Confidence != nil {
		it.Confidence = req.GetConfidence()
		if !(it.Confidence >= 0 && it.Confidence <= 1) { // NaN too
			bad.addf("confidence", "must be between 0 and 1")
		}
	}
	if len(it.Evidence) > maxEvidenceBytes {
		bad.add("evidence", errTooBig)
	}
	return it, bad.orNil()
}

// queryTarget is what a QueryItemsRequest matches: exactly one of a path, a pattern, or all.
type queryTarget struct {
	path, pattern string
}

// query is a checked QueryItemsRequest.
type query struct {
	target        queryTarget
	types         []store.Type
	tags          []string
	minConfidence float64
	text          string
	limit         int
	project       string
}

// newQuery checks a QueryItemsRequest.
func newQuery(req *knowledgev1.QueryItemsRequest) (query, error) {
	bad := &badRequest{request: "QueryItemsRequest"}
	q := query{tags: req.GetTags(), minConfidence: req.GetMinConfidence(), text: req.GetText(), limit: int(req.GetLimit()),
		project: req.GetProject()}
	checkProject(bad, "project", q.project)
	var err error
	switch t := req.GetTarget().(type) {
	case *knowledgev1.QueryItemsRequest_FilePath:
		if q.target.path, err = repopath.Clean(t.FilePath); err != nil {
			bad.add("file_path", err)
		}
	case *knowledgev1.QueryItemsRequest_FilePattern:
		if q.target.pattern, err = repopath.CleanGlob(t.FilePattern); err != nil {
			bad.add("file_pattern", err)
		}
	case *knowledgev1.QueryItemsRequest_All:
		if !t.All {
			bad.addf("all", "must be true to query every item")
		}
	default:
		bad.addf("target", "one of file_path, file_pattern or all is required")
	}
	if len(req.GetTypes()) > len(itemTypes) {
		bad.addf("types", "must name at most %d types", len(itemTypes))
	}
	for i, t := range req.GetTypes() {
		st, ok := itemTypes[t]
		if !ok {
			bad.add(fmt.Sprintf("types[%d]", i), errUnknownType)
			continue
		}
		q.types = append(q.types, st)
	}
	checkTags(bad, q.tags, false)
	if !(q.minConfidence >= 0 && q.minConfidence <= 1) {
		bad.addf("min_confidence", "must be between 0 and 1")
	}
	switch {
	case utf8.RuneCountInString(q.text) > maxTextChars:
		bad.addf("text", "must be at most %d characters", maxTextChars)
	case q.text != "" && !strings.ContainsFunc(q.text, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }):
		bad.addf("text", "must contain a word to search for")
	}
	switch {
	case q.limit < 0 || q.limit > maxLimit:
		bad.addf("limit", "must be between 0 and %d", maxLimit)
	case q.limit == 0:
		q.limit = defaultLimit
	}
	return q, bad.orNil()
}

// checkTags adds a field error per malformed tag (and per repeated one if unique).
func checkTags(bad *badRequest, tags []string, unique bool) {
	if len(tags) > maxTags {
		bad.addf("tags", "must be at most %d tags", maxTags)
		return
	}
	seen := make(map[string]bool, len(tags))
	for i, tag := range tags {
		switch {
		case !tagPattern.MatchString(tag):
			bad.addf(fmt.Sprintf("tags[%d]", i), "must be a lower-case word: letters, digits, '.', '_' or '-', up to 64")
		case unique && seen[tag]:
			bad.addf(fmt.Sprintf("tags[%d]", i), "repeats tag %q", tag)
		}
		seen[tag] = true
	}
}

// listing is a checked ListItemsRequest.
type listing struct {
	filter   store.ListFilter
	pageSize int
}

// newListing checks a ListItemsRequest, page token included.
func newListing(req *knowledgev1.ListItemsRequest) (listing, error) {
	bad := &badRequest{request: "ListItemsRequest"}
	var l listing
	if t := req.GetType(); t != knowledgev1.ItemType_ITEM_TYPE_UNSPECIFIED {
		st, ok := itemTypes[t]
		if !ok {
			bad.add("type", errUnknownType)
		}
		l.filter.Type = st
	}
	if p := req.GetFilePattern(); p != "" {
		pattern, err := repopath.CleanGlob(p)
		if err != nil {
			bad.add("file_pattern", err)
		}
		l.filter.FilePattern = pattern
	}
	if req.Project != nil {
		project := req.GetProject()
		checkProject(bad, "project", project)
		l.filter.Project = &project
	}
	l.pageSize = int(req.GetPageSize())
	switch {
	case l.pageSize < 0 || l.pageSize > maxPageSize:
		bad.addf("page_size", "must be between 0 and %d", maxPageSize)
	case l.pageSize == 0:
		l.pageSize = defaultPageSize
	}
	if len(bad.fields) == 0 {
		var before int64
		ok, err := pagetoken.Decode(req.GetPageToken(), req, &before)
		switch {
		case err != nil:
			bad.add("page_token", err)
		case ok && before <= 0:
			bad.add("page_token", &pagetoken.Error{Reason: pagetoken.ReasonMalformed})
		case ok:
			l.filter.BeforeID = before
		}
	}
	// One more than a page tells whether there is a next one.
	l.filter.Limit = l.pageSize + 1
	return l, bad.orNil()
}

// idPrefix starts every item id: "kn_42" is row 42.
const idPrefix = "kn_"

// formatID returns the public id of the item with row id id.
func formatID(id int64) string { return idPrefix + strconv.FormatInt(id, 10) }

// parseID returns the row id of a public id, or false if the id is not one formatID returns.
func parseID(s string) (int64, bool) {
	digits, ok := strings.CutPrefix(s, idPrefix)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || id <= 0 || formatID(id) != s {
		return 0, false
	}
	return id, true
}

// maxProjectBytes bounds a project (repository identity).
const maxProjectBytes = 512

// checkProject refuses a project the proto's rule refuses: too long, or holding a control
// character (it is stored and compared as text on every backend).
func checkProject(bad *badRequest, field, project string) {
	switch {
	case len(project) > maxProjectBytes:
		bad.addf(field, "must be at most %d bytes", maxProjectBytes)
	case strings.ContainsFunc(project, unicode.IsControl):
		bad.addf(field, "must not contain control characters")
	}
}
