// Package knowledge is converge's Knowledge service (DESIGN.md §1): the gotcha knowledge base.
// Agents record what they learn against file glob patterns; the next agent touching a matching
// file gets it before it starts, ranked by confidence, which confirmations raise, refutations
// lower and time decays (package confidence; docs/knowledge.md for operators).
//
// The handlers check requests (request.go), call the store, and map every error to a status in
// one place (errors.go). Matching a file path is two steps: the store returns candidates from the
// few index buckets that can hold a matching pattern (store.PathBuckets), best first, and the
// handler confirms each with a glob match and the exact effective confidence.
package knowledge

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"

	"github.com/converge-dev/converge/platform/pagetoken"
	"github.com/converge-dev/converge/services/knowledge/confidence"
	"github.com/converge-dev/converge/services/knowledge/store"
)

// maxCandidateBatch bounds the candidates a query reads from each bucket in one round.
const maxCandidateBatch = 1024

// Server implements knowledgev1.KnowledgeServiceServer on a store.
type Server struct {
	knowledgev1.UnimplementedKnowledgeServiceServer
	store store.Store
	now   func() time.Time
}

// Option configures a Server.
type Option func(*Server)

// WithClock makes the server read the time from now instead of time.Now: recording,
// confirmation and decay all follow it, so tests are exact.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// New returns the Knowledge service on st.
func New(st store.Store, opts ...Option) *Server {
	s := &Server{store: st, now: time.Now}
	for _, o := range opts {
		o(s)
	}
	return s
}

var _ knowledgev1.KnowledgeServiceServer = (*Server)(nil)

// hitFlushInterval is how often Start writes the hits queries counted (store.Store.FlushHits).
const hitFlushInterval = time.Second

// Start runs the background work until ctx ends: holding the items with most hits
// (store.Store.Preload: a restarted replica answers the items answered most without reading
// them), and writing the hits that queries counted every hitFlushInterval (closing the store
// writes the rest). A flush that fails is retried by the next (the store keeps its hits); a
// preload that fails is not retried (queries hold the items they read).
func (s *Server) Start(ctx context.Context) {
	go func() { _ = s.store.Preload(ctx) }()
	go s.flushHits(ctx)
}

func (s *Server) flushHits(ctx context.Context) {
	t := time.NewTicker(hitFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = s.store.FlushHits(ctx)
		}
	}
}

// RecordItem stores an item, or confirms its twin (same type, pattern and normalised content).
func (s *Server) RecordItem(ctx context.Context, req *knowledgev1.RecordItemRequest) (*knowledgev1.RecordItemResponse, error) {
	in, err := newItem(req)
	if err != nil {
		return nil, toStatus(err)
	}
	// Provenance comes from the caller's credentials, never from the request (provenance.go).
	in.RecordedBy, in.Provisional = recorder(ctx)
	now := s.now()
	it, created, err := s.store.Record(ctx, in, now)
	if err != nil {
		return nil, toStatus(err)
	}
	outcome := knowledgev1.RecordOutcome_RECORD_OUTCOME_CONFIRMED_EXISTING
	if created {
		outcome = knowledgev1.RecordOutcome_RECORD_OUTCOME_CREATED
	}
	return &knowledgev1.RecordItemResponse{Item: toProto(it, now), Outcome: outcome}, nil
}

// QueryItems answers the items matching a path, stored under a pattern, or all, best first, and
// counts a hit on each.
func (s *Server) QueryItems(ctx context.Context, req *knowledgev1.QueryItemsRequest) (*knowledgev1.QueryItemsResponse, error) {
	q, err := newQuery(req)
	if err != nil {
		return nil, toStatus(err)
	}
	now := s.now()
	cq := store.CandidateQuery{
		Path:    q.target.path,
		Pattern: q.target.pattern,
		Types:   q.types,
		Tags:    q.tags,
		Text:    q.text,
		Project: q.project,
		MinRank: confidence.MinRank(q.minConfidence, now),
		// Candidates beyond the limit make up for those the glob or the exact confidence turn
		// down, usually in one round: few are, as the buckets are narrow. Every row read costs
		// the statement an index entry per bucket (it reads up to Limit from each), so the
		// margin is a quarter of the limit, at least 8 (bench/PROFILE.md, p17p4).
		Limit: max(q.limit+max(q.limit/4, 8), 16),
	}
	matches := make([]store.Candidate, 0, min(q.limit, cq.Limit))
	for len(matches) < q.limit {
		page, err := s.store.Candidates(ctx, cq)
		if err != nil {
			return nil, toStatus(err)
		}
		for _, c := range page {
			if q.target.path != "" && !store.MatchPattern(c.FilePattern, q.target.path) {
				continue
			}
			if confidence.Effective(c.Confidence, c.LastConfirmedAt, now) < q.minConfidence {
				continue
			}
			if matches = append(matches, c); len(matches) == q.limit {
				break
			}
		}
		if len(page) < cq.Limit {
			break // no more candidates
		}
		next := page[len(page)-1].Cursor()
		cq.After = &next
		// Most candidates were turned down: read on in bigger steps.
		cq.Limit = min(2*cq.Limit, maxCandidateBatch)
	}

	// Read the items answered, counting a hit on each, and answer them in rank order.
	items, err := s.store.Answer(ctx, matches)
	if err != nil {
		return nil, toStatus(err)
	}
	return &knowledgev1.QueryItemsResponse{Matches: matchProtos(matches, items, now)}, nil
}

// matchProtos returns the items answered for the matches, in the matches' order (an item deleted
// since it was a candidate is left out), as the response's messages. A query answers up to its
// limit of items, each a message with a Source and three Timestamps: they are allocated together,
// one slice of each kind per query, not one allocation per message (bench/PROFILE.md, p17p4).
func matchProtos(matches []store.Candidate, items []store.Item, now time.Time) []*knowledgev1.ItemMatch {
	answered := func(id int64) *store.Item {
		for i := range items {
			if items[i].ID == id {
				return &items[i]
			}
		}
		return nil
	}
	if len(items) > linearLookupMax {
		byID := make(map[int64]*store.Item, len(items))
		for i := range items {
			byID[items[i].ID] = &items[i]
		}
		answered = func(id int64) *store.Item { return byID[id] }
	}
	n := len(items)
	var (
		out     = make([]*knowledgev1.ItemMatch, 0, n)
		ms      = make([]knowledgev1.ItemMatch, n)
		ps      = make([]knowledgev1.Item, n)
		ts      = make([]timestamppb.Timestamp, 3*n)
		sources = make([]knowledgev1.Source, 0, n)
	)
	for _, c := range matches {
		it := answered(c.ID)
		if it == nil {
			continue // deleted since it was a candidate
		}
		i := len(out)
		p := &ps[i]
		fillProto(p, it, now, ts[3*i:3*i+3:3*i+3])
		if it.Source != (store.Source{}) {
			sources = append(sources, knowledgev1.Source{
				ExecutionId: it.Source.ExecutionID, TaskId: it.Source.TaskID, AgentId: it.Source.AgentID,
			})
			p.Source = &sources[len(sources)-1]
		}
		m := &ms[i]
		m.Item, m.Specificity = p, it.Specificity
		out = append(out, m)
	}
	return out
}

// linearLookupMax is the most items matchProtos finds by a scan of the answer rather than by a
// map: a query's limit is 20 by default, where a scan of 20 costs less than building the map.
const linearLookupMax = 32

// GetItem answers one item; it is not a hit.
func (s *Server) GetItem(ctx context.Context, req *knowledgev1.GetItemRequest) (*knowledgev1.GetItemResponse, error) {
	id, ok := parseID(req.GetId())
	if !ok {
		return nil, toStatus(&itemNotFound{id: req.GetId()})
	}
	it, err := s.store.Get(ctx, id)
	if err != nil {
		return nil, toStatus(notFoundAs(req.GetId(), err))
	}
	return &knowledgev1.GetItemResponse{Item: toProto(it, s.now())}, nil
}

// ListItems lists items newest first, a page at a time.
func (s *Server) ListItems(ctx context.Context, req *knowledgev1.ListItemsRequest) (*knowledgev1.ListItemsResponse, error) {
	l, err := newListing(req)
	if err != nil {
		return nil, toStatus(err)
	}
	items, err := s.store.List(ctx, l.filter)
	if err != nil {
		return nil, toStatus(err)
	}
	res := &knowledgev1.ListItemsResponse{}
	if len(items) > l.pageSize {
		items = items[:l.pageSize]
		res.NextPageToken = pagetoken.Encode(req, items[len(items)-1].ID)
	}
	now := s.now()
	res.Items = make([]*knowledgev1.Item, len(items))
	for i, it := range items {
		res.Items[i] = toProto(it, now)
	}
	return res, nil
}

// ConfirmItem raises an item's confidence and restarts its decay clock.
func (s *Server) ConfirmItem(ctx context.Context, req *knowledgev1.ConfirmItemRequest) (*knowledgev1.ConfirmItemResponse, error) {
	if len(req.GetEvidence()) > maxEvidenceBytes {
		return nil, toStatus(&badRequest{request: "ConfirmItemRequest", fields: []fieldError{{"evidence", errTooBig}}})
	}
	id, ok := parseID(req.GetId())
	if !ok {
		return nil, toStatus(&itemNotFound{id: req.GetId()})
	}
	now := s.now()
	it, err := s.store.Confirm(ctx, id, req.GetEvidence(), confirmer(ctx), now)
	if err != nil {
		return nil, toStatus(notFoundAs(req.GetId(), err))
	}
	return &knowledgev1.ConfirmItemResponse{Item: toProto(it, now)}, nil
}

// RefuteItem lowers an item's confidence.
func (s *Server) RefuteItem(ctx context.Context, req *knowledgev1.RefuteItemRequest) (*knowledgev1.RefuteItemResponse, error) {
	if len(req.GetReason()) > maxEvidenceBytes {
		return nil, toStatus(&badRequest{request: "RefuteItemRequest", fields: []fieldError{{"reason", errTooBig}}})
	}
	id, ok := parseID(req.GetId())
	if !ok {
		return nil, toStatus(&itemNotFound{id: req.GetId()})
	}
	now := s.now()
	it, err := s.store.Refute(ctx, id, req.GetReason(), now)
	if err != nil {
		return nil, toStatus(notFoundAs(req.GetId(), err))
	}
	return &knowledgev1.RefuteItemResponse{Item: toProto(it, now)}, nil
}

// DeleteItem removes an item.
func (s *Server) DeleteItem(ctx context.Context, req *knowledgev1.DeleteItemRequest) (*knowledgev1.DeleteItemResponse, error) {
	id, ok := parseID(req.GetId())
	if !ok {
		return nil, toStatus(&itemNotFound{id: req.GetId()})
	}
	if err := s.store.Delete(ctx, id); err != nil {
		return nil, toStatus(notFoundAs(req.GetId(), err))
	}
	return &knowledgev1.DeleteItemResponse{}, nil
}

// protoTypes maps the store's item types to the proto's.
var protoTypes = func() map[store.Type]knowledgev1.ItemType {
	m := make(map[store.Type]knowledgev1.ItemType, len(itemTypes))
	for p, s := range itemTypes {
		m[s] = p
	}
	return m
}()

// toProto returns the item as answered at now: its effective confidence decayed to now.
func toProto(it store.Item, now time.Time) *knowledgev1.Item {
	out := &knowledgev1.Item{}
	fillProto(out, &it, now, make([]timestamppb.Timestamp, 3))
	if it.Source != (store.Source{}) {
		out.Source = &knowledgev1.Source{
			ExecutionId: it.Source.ExecutionID,
			TaskId:      it.Source.TaskID,
			AgentId:     it.Source.AgentID,
		}
	}
	return out
}

// fillProto sets out, a new message, to the item as answered at now but for its Source; ts holds
// its three Timestamps.
func fillProto(out *knowledgev1.Item, it *store.Item, now time.Time, ts []timestamppb.Timestamp) {
	setTime(&ts[0], it.CreatedAt)
	setTime(&ts[1], it.UpdatedAt)
	setTime(&ts[2], it.LastConfirmedAt)
	out.Id = formatID(it.ID)
	out.Type = protoTypes[it.Type]
	out.Content = it.Content
	out.FilePattern = it.FilePattern
	out.Tags = it.Tags
	out.Confidence = it.Confidence
	out.EffectiveConfidence = confidence.Effective(it.Confidence, it.LastConfirmedAt, now)
	out.Evidence = it.Evidence
	out.CreateTime, out.UpdateTime, out.LastConfirmTime = &ts[0], &ts[1], &ts[2]
	out.HitCount = it.HitCount
	out.ConfirmCount = it.ConfirmCount
	out.RefuteCount = it.RefuteCount
	out.Project = it.Project
	out.RecordedBy = it.RecordedBy
	out.Provisional = it.Provisional
	out.ConfirmedBy = it.ConfirmedBy
}

// setTime sets ts, a new message, to t, as timestamppb.New does.
func setTime(ts *timestamppb.Timestamp, t time.Time) {
	ts.Seconds, ts.Nanos = t.Unix(), int32(t.Nanosecond())
}
