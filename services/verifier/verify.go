package verifier

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/platform/ids"
	"github.com/converge-dev/converge/services/verifier/check"
	"github.com/converge-dev/converge/services/verifier/criteria"
	"github.com/converge-dev/converge/services/verifier/report"
	"github.com/converge-dev/converge/services/verifier/store"
)

// emitFunc sends one progress event of VerifyStream (nil for Verify).
type emitFunc func(*verifierv1.VerifyStreamResponse) error

// verify runs one verification: criteria, target, checks, verdict, storage. Errors are domain
// errors for toStatus; a check that fails or cannot run is not an error but part of the report.
func (s *Server) verify(ctx context.Context, req *verifierv1.VerifyRequest, emit emitFunc) (*verifierv1.VerifyReport, error) {
	start := s.cfg.now().UTC().Truncate(time.Millisecond)
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		return nil, errBusy
	}

	crit, hash, err := criteriaOf(req)
	if err != nil {
		return nil, err
	}
	run, err := s.checkRequest(req, crit)
	if err != nil {
		return nil, err
	}
	red, err := s.checkPolicy(ctx, req, crit, run)
	if err != nil {
		return nil, err
	}

	// The iteration: as requested (above every iteration of the loop), or the next one.
	loopKey := req.GetLoopKey()
	latest, exists, err := s.store.Iterations(ctx, loopKey, req.GetIteration())
	if err != nil {
		return nil, err
	}
	iteration := latest + 1
	if req.Iteration != nil {
		iteration = req.GetIteration()
		if err := store.CheckIteration(loopKey, iteration, latest, exists); err != nil {
			return nil, err
		}
	}

	dryRun := req.GetDryRun()
	reportID := ""
	if !dryRun {
		reportID = ids.New("vr", start)
	}
	// The verifier's cap on a verification's wall time: the checkout and the checks run under it.
	parent := ctx
	ctx, cancelWall := context.WithTimeout(ctx, s.cfg.maxVerifyTime)
	defer cancelWall()
	opts := s.checkOptions(req)
	target, resolved, cleanup := s.resolveTarget(ctx, req.GetTarget(), opts, dryRun)
	defer cleanup()

	signoffs := map[string]*verifierv1.HumanVerdict{}
	if !dryRun {
		// Every existing report is earlier than this one: every sign-off of the loop may apply.
		if signoffs, err = s.store.Signoffs(ctx, loopKey, math.MaxInt64); err != nil {
			return nil, err
		}
	}

	// Progress events are sent one at a time, numbered; a stream that breaks stops the run.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ev := &events{emit: emit, cancel: cancel, now: s.cfg.now, total: int32(len(crit)), redact: red}
	parallelism := int(req.GetParallelism())
	if parallelism == 0 {
		parallelism = defaultParallelism
	}
	toRun := 0
	for i, c := range crit {
		if run[i] && !dryRun && c.GetTag() != verifierv1.CriterionTag_CRITERION_TAG_HUMAN_VERIFY {
			toRun++
		}
	}
	ev.send(&verifierv1.VerifyStreamResponse{Event: &verifierv1.VerifyStreamResponse_Started{Started: &verifierv1.VerificationStarted{
		ReportId:    reportID,
		LoopKey:     loopKey,
		Iteration:   iteration,
		Criteria:    crit,
		ChecksToRun: int32(toRun),
		Parallelism: int32(parallelism),
		Target:      resolved,
	}}})

	results := make([]*verifierv1.CriterionResult, len(crit))
	locations := map[string]report.Location{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, parallelism)
	for i, c := range crit {
		switch {
		case !run[i]:
			results[i] = skipped(c, "not run: not among only_criteria")
		case dryRun:
			results[i] = skipped(c, check.Describe(target, c))
		case c.GetTag() == verifierv1.CriterionTag_CRITERION_TAG_HUMAN_VERIFY:
			results[i] = report.HumanResult(c, signoffs[c.GetId()], reportID)
		default:
			continue
		}
		ev.finished(results[i])
	}
	// The validation cache (cache.go): a keyed result of the loop's latest complete report is
	// reused when its key (the check and what it reads of the clean checkout) is the same.
	var keys []string
	cached := map[string]cachedResult{}
	if !dryRun {
		keys = cacheKeys(ctx, target.Dir, crit)
		cached = s.cachedResults(ctx, loopKey)
	}
	for i, c := range crit {
		if results[i] != nil {
			continue
		}
		key := ""
		if keys != nil {
			key = keys[i]
		}
		if r, loc, ok := reuse(cached, c, key); ok {
			// Checks started above write results and locations as they end: under mu.
			mu.Lock()
			results[i] = r
			if loc.File != "" {
				locations[c.GetId()] = loc
			}
			mu.Unlock()
			ev.finished(r)
			continue
		}
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
			case <-ctx.Done():
				return
			}
			o := *opts
			o.OnAttempt = func(n int32) { ev.started(c, n) }
			res := check.Run(ctx, target, &o, c)
			if ctx.Err() != nil {
				return
			}
			mu.Lock()
			results[i] = res.CriterionResult
			results[i].CacheKey = key
			if res.File != "" {
				locations[c.GetId()] = report.Location{File: res.File, Line: res.Line}
			}
			mu.Unlock()
			ev.finished(res.CriterionResult)
		})
	}
	wg.Wait()
	if ctx.Err() != nil && parent.Err() == nil && ev.err() == nil {
		return nil, &wallTimeError{max: s.cfg.maxVerifyTime}
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up (or the stream broke): a partial run is never a verdict.
		return nil, err
	}

	r := &verifierv1.VerifyReport{
		Id:           reportID,
		LoopKey:      loopKey,
		Iteration:    iteration,
		CreateTime:   timestamppb.New(start),
		Results:      results,
		CriteriaHash: hash,
		Target:       resolved,
		Partial:      len(req.GetOnlyCriteria()) > 0,
		DryRun:       dryRun,
		Labels:       req.GetLabels(),
	}
	report.Finish(r, crit, locations)
	red.redact(r)
	report.Sanitize(r)
	report.Shrink(r, report.MaxBytes)
	r.Duration = durationpb.New(s.cfg.now().Sub(start))
	if !dryRun {
		if err := s.store.InsertReport(ctx, r, req.Iteration == nil); err != nil {
			return nil, err
		}
		s.cfg.logger.InfoContext(ctx, "verified", "loop_key", loopKey, "iteration", r.GetIteration(), "report_id", r.GetId(),
			"verdict", store.ShortName(r.GetVerdict()), "pass", r.GetPassCount(), "fail", r.GetFailCount(),
			"error", r.GetErrorCount(), "pending_human", r.GetPendingHumanCount(), "duration", r.GetDuration().AsDuration())
	}
	ev.send(&verifierv1.VerifyStreamResponse{Event: &verifierv1.VerifyStreamResponse_Report{Report: r}})
	if err := ev.err(); err != nil {
		return nil, err
	}
	return r, nil
}

// criteriaOf answers the request's criteria and their hash: parsed from markdown, or the
// structured ones checked for what protovalidate cannot check.
func criteriaOf(req *verifierv1.VerifyRequest) ([]*verifierv1.Criterion, string, error) {
	if md := req.GetCriteriaMarkdown(); md != "" {
		res, err := criteria.Parse(md)
		if err != nil {
			return nil, "", withField("VerifyRequest", "criteria_markdown", err)
		}
		return res.Criteria, res.Hash, nil
	}
	crit := req.GetCriteria().GetCriteria()
	bad := &badRequestError{request: "VerifyRequest"}
	for i, c := range crit {
		for _, v := range criteria.Semantic(c) {
			bad.violations = append(bad.violations, grpcerr.FieldViolation{
				Field: fmt.Sprintf("criteria.criteria[%d].%s", i, v.Field), Description: v.Description,
			})
		}
	}
	if len(bad.violations) > 0 {
		return nil, "", bad
	}
	return crit, criteria.Hash(crit), nil
}

// checkRequest checks what depends on the criteria and the target together, and answers which
// criteria run (only_criteria).
func (s *Server) checkRequest(req *verifierv1.VerifyRequest, crit []*verifierv1.Criterion) ([]bool, error) {
	bad := &badRequestError{request: "VerifyRequest"}
	add := func(field, format string, args ...any) {
		bad.violations = append(bad.violations, grpcerr.FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
	}
	t := req.GetTarget()
	if dir := t.GetLocalDir(); dir != "" {
		if v := s.checkLocalDir(dir); v != nil {
			bad.violations = append(bad.violations, *v)
		}
	}
	run := make([]bool, len(crit))
	index := make(map[string]int, len(crit))
	for i, c := range crit {
		index[c.GetId()] = i
		run[i] = len(req.GetOnlyCriteria()) == 0
	}
	for i, id := range req.GetOnlyCriteria() {
		j, ok := index[id]
		if !ok {
			add(fmt.Sprintf("only_criteria[%d]", i), "criterion %s is not among the criteria", id)
			continue
		}
		run[j] = true
	}
	hasDir := t.GetLocalDir() != "" || t.GetGit() != nil || t.GetScratch()
	for i, c := range crit {
		if !run[i] || c.GetTag() == verifierv1.CriterionTag_CRITERION_TAG_HUMAN_VERIFY {
			continue
		}
		field := func(path string) string {
			if req.GetCriteriaMarkdown() != "" {
				return fmt.Sprintf("criteria_markdown:L%d", c.GetSourceLine())
			}
			return fmt.Sprintf("criteria.criteria[%d].%s", i, path)
		}
		switch {
		case c.GetHttp() != nil && c.GetHttp().GetPath() != "" && t.GetBaseUrl() == "":
			add(field("http.path"), "%s: an http check by path needs target.base_url (or give an absolute url)", c.GetId())
		case c.GetFile() != nil && !hasDir:
			add(field("file"), "%s: a file check needs a directory target (target.local_dir or target.git)", c.GetId())
		case c.GetGrpc() != nil && c.GetGrpc().GetAddress() == "" && t.GetGrpcAddress() == "":
			add(field("grpc.address"), "%s: a grpc check needs an address (its own, or target.grpc_address)", c.GetId())
		}
	}
	s.checkDestinations(req, crit, run, bad)
	if len(bad.violations) > 0 {
		return nil, bad
	}
	return run, nil
}

// checkOptions answers the limits of the request's checks, defaults applied.
func (s *Server) checkOptions(req *verifierv1.VerifyRequest) *check.Options {
	o := &check.Options{
		DefaultTimeout: defaultCheckTimeout,
		OutputCap:      req.GetOutputCapBytes(),
		ExcerptBytes:   int(req.GetEvidenceExcerptBytes()),
		MaxAttempts:    int(req.GetMaxAttempts()),
		RetryBackoff:   s.cfg.retryBackoff,
		Destinations:   s.cfg.destinations,
		Sandbox:        s.cfg.sandbox,
		OutputBudget:   s.cfg.outputBudget,
		LookupEnv:      s.cfg.lookupEnv,
		ScratchDir:     s.cfg.scratchDir,
	}
	if d := req.GetDefaultCheckTimeout(); d != nil {
		o.DefaultTimeout = d.AsDuration()
	}
	if o.OutputCap == 0 {
		o.OutputCap = defaultOutputCap
	}
	if o.ExcerptBytes == 0 {
		o.ExcerptBytes = defaultExcerptBytes
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = defaultMaxAttempts
	}
	return o
}

// skipped is the result of a criterion that was not run.
func skipped(c *verifierv1.Criterion, why string) *verifierv1.CriterionResult {
	return &verifierv1.CriterionResult{
		CriterionId: c.GetId(),
		Name:        c.GetName(),
		Tag:         c.GetTag(),
		Status:      verifierv1.CriterionStatus_CRITERION_STATUS_SKIP,
		Evidence:    &verifierv1.Evidence{Summary: why},
	}
}

// events sends a verification's progress events, one at a time and numbered.
type events struct {
	emit   emitFunc
	cancel context.CancelFunc
	now    func() time.Time
	total  int32
	redact *redactor

	mu      sync.Mutex
	seq     int64
	done    int32
	sendErr error
}

func (e *events) send(msg *verifierv1.VerifyStreamResponse) {
	if e.emit == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sendLocked(msg)
}

func (e *events) sendLocked(msg *verifierv1.VerifyStreamResponse) {
	if e.sendErr != nil {
		return
	}
	e.seq++
	msg.Seq = e.seq
	msg.Time = timestamppb.New(e.now())
	if err := e.emit(msg); err != nil {
		e.sendErr = err
		e.cancel()
	}
}

func (e *events) started(c *verifierv1.Criterion, attempt int32) {
	e.send(&verifierv1.VerifyStreamResponse{Event: &verifierv1.VerifyStreamResponse_CriterionStarted{
		CriterionStarted: &verifierv1.CriterionStarted{CriterionId: c.GetId(), Name: c.GetName(), Attempt: attempt},
	}})
}

func (e *events) finished(res *verifierv1.CriterionResult) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.done++
	if e.emit == nil {
		return
	}
	if e.redact != nil && len(e.redact.values) > 0 {
		res = proto.CloneOf(res)
		e.redact.redact(res)
	}
	e.sendLocked(&verifierv1.VerifyStreamResponse{Event: &verifierv1.VerifyStreamResponse_CriterionFinished{
		CriterionFinished: &verifierv1.CriterionFinished{Result: res, DoneCount: e.done, TotalCount: e.total},
	}})
}

func (e *events) err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sendErr
}
