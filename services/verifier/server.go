// Package verifier is converge's Verifier service: "Verify Done" as a service (see DESIGN.md §1
// and docs/verifier.md of the project). It parses done-criteria (package criteria), runs their
// checks against a target (package check), turns the results into the seed's verdict with
// evidence (package report), and keeps every report under its loop for history,
// anti-thrashing analysis and human sign-off (package store).
package verifier

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/platform/ids"
	"github.com/converge-dev/converge/platform/netguard"
	"github.com/converge-dev/converge/platform/pagetoken"
	"github.com/converge-dev/converge/platform/proc"
	"github.com/converge-dev/converge/services/verifier/check"
	"github.com/converge-dev/converge/services/verifier/criteria"
	"github.com/converge-dev/converge/services/verifier/report"
	"github.com/converge-dev/converge/services/verifier/store"
)

// Defaults of a Server and of a verification.
const (
	// DefaultMaxVerifications is how many verifications a server runs at once.
	DefaultMaxVerifications = 8
	// DefaultRetryBackoff is the pause before a check's second connection attempt (doubling).
	DefaultRetryBackoff = time.Second
	// EnvAllowedRoots names the environment variable listing the allowed roots of local_dir
	// targets, separated by the OS path-list separator (":").
	EnvAllowedRoots = "CONVERGE_VERIFIER_ALLOWED_ROOTS"

	// DefaultOutputMemory is the memory all command checks' output tails share at once.
	DefaultOutputMemory = 256 << 20
	// DefaultMaxVerificationTime bounds a verification from start to report.
	DefaultMaxVerificationTime = time.Hour

	defaultParallelism    = 4
	defaultCheckTimeout   = 60 * time.Second
	defaultOutputCap      = 1 << 20
	defaultExcerptBytes   = 4096
	defaultMaxAttempts    = 3
	defaultPageSize       = 100
	defaultThrashWindow   = 10
	defaultHumanPageSize  = 100
	maxReportsPerAnalysis = 100
)

// Server implements verifierv1.VerifierServiceServer on a store.
type Server struct {
	verifierv1.UnimplementedVerifierServiceServer
	store store.Store
	cfg   config
	// slots holds one token per running verification (MaxVerifications).
	slots chan struct{}
}

// config is what Options set.
type config struct {
	allowedRoots     []string // absolute, symlinks resolved where they exist
	scratchDir       string
	maxVerifications int
	retryBackoff     time.Duration
	lookupEnv        func(string) (string, bool)
	now              func() time.Time
	logger           *slog.Logger

	allowedEnv      map[string]bool // names checks may read (WithAllowedEnv)
	noCommandChecks bool            // WithCommandChecks(false)
	commandRole     auth.Role       // WithCommandCheckRole
	destinations    *netguard.Policy
	sandbox         *proc.Sandbox
	outputBudget    *check.OutputBudget
	maxVerifyTime   time.Duration
}

// Option configures a Server.
type Option func(*config)

// WithAllowedRoots sets the directories local_dir targets must be inside (after resolving
// symlinks). Relative roots are taken from the working directory. Without any, local_dir
// targets are refused.
func WithAllowedRoots(roots ...string) Option {
	return func(c *config) {
		for _, r := range roots {
			if r == "" {
				continue
			}
			abs, err := filepath.Abs(r)
			if err != nil {
				continue
			}
			if resolved, err := filepath.EvalSymlinks(abs); err == nil {
				abs = resolved
			}
			c.allowedRoots = append(c.allowedRoots, abs)
		}
	}
}

// WithScratchDir sets where repository checkouts and the scratch directories of command checks
// go (default: the OS temporary directory).
func WithScratchDir(dir string) Option { return func(c *config) { c.scratchDir = dir } }

// WithMaxVerifications sets how many verifications run at once; more answer ResourceExhausted.
func WithMaxVerifications(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxVerifications = n
		}
	}
}

// WithRetryBackoff sets the pause before a check's second connection attempt (it doubles for
// each further one); tests shorten the contract's 1 s.
func WithRetryBackoff(d time.Duration) Option { return func(c *config) { c.retryBackoff = d } }

// WithLookupEnv sets how env_passthrough, header_env and metadata_env read the verifier's
// environment (default os.LookupEnv).
func WithLookupEnv(f func(string) (string, bool)) Option { return func(c *config) { c.lookupEnv = f } }

// WithSandbox confines command checks (platform/proc.Sandbox, e.g. from proc.DetectSandbox):
// another uid, user/PID/mount namespaces, a cgroup per check. Without it they run as the
// verifier's user, in their own process group only.
func WithSandbox(sb *proc.Sandbox) Option { return func(c *config) { c.sandbox = sb } }

// WithOutputMemory bounds the memory the output tails of every running command check take
// together; checks that do not fit keep theirs in files until memory is free (default
// DefaultOutputMemory).
func WithOutputMemory(bytes int64) Option {
	return func(c *config) {
		if bytes > 0 {
			c.outputBudget = check.NewOutputBudget(bytes)
		}
	}
}

// WithMaxVerificationTime bounds a verification (checkout and checks) from start to report;
// past it, its checks are killed and it answers DeadlineExceeded (default
// DefaultMaxVerificationTime).
func WithMaxVerificationTime(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.maxVerifyTime = d
		}
	}
}

// WithClock sets the clock reports are timestamped with (default time.Now).
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithLogger sets the logger of verifications (default: discard).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// AllowedRootsFromEnv answers the allowed roots listed in $CONVERGE_VERIFIER_ALLOWED_ROOTS, or def
// when it is not set.
func AllowedRootsFromEnv(def ...string) []string {
	v, ok := os.LookupEnv(EnvAllowedRoots)
	if !ok {
		return def
	}
	var out []string
	for _, r := range filepath.SplitList(v) {
		if r != "" {
			out = append(out, r)
		}
	}
	return out
}

// New returns the Verifier service on st.
func New(st store.Store, opts ...Option) *Server {
	cfg := config{
		maxVerifications: DefaultMaxVerifications,
		retryBackoff:     DefaultRetryBackoff,
		lookupEnv:        os.LookupEnv,
		now:              time.Now,
		logger:           slog.New(slog.DiscardHandler),
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.scratchDir == "" {
		cfg.scratchDir = os.TempDir()
	}
	if cfg.outputBudget == nil {
		cfg.outputBudget = check.NewOutputBudget(DefaultOutputMemory)
	}
	if cfg.maxVerifyTime <= 0 {
		cfg.maxVerifyTime = DefaultMaxVerificationTime
	}
	if cfg.destinations == nil {
		cfg.destinations = &netguard.Policy{} // the defaults: internal ranges refused
	}
	return &Server{store: st, cfg: cfg, slots: make(chan struct{}, cfg.maxVerifications)}
}

var _ verifierv1.VerifierServiceServer = (*Server)(nil)

// AllowedRoots answers the resolved allowed roots of local_dir targets.
func (s *Server) AllowedRoots() []string { return append([]string(nil), s.cfg.allowedRoots...) }

// ParseCriteria implements verifierv1.VerifierServiceServer.
func (s *Server) ParseCriteria(_ context.Context, req *verifierv1.ParseCriteriaRequest) (*verifierv1.ParseCriteriaResponse, error) {
	res, err := criteria.Parse(req.GetMarkdown())
	if err != nil {
		return nil, s.toStatus(withField("ParseCriteriaRequest", "markdown", err))
	}
	return &verifierv1.ParseCriteriaResponse{Criteria: res.Criteria, Warnings: res.Warnings, CriteriaHash: res.Hash}, nil
}

// Verify implements verifierv1.VerifierServiceServer.
func (s *Server) Verify(ctx context.Context, req *verifierv1.VerifyRequest) (*verifierv1.VerifyResponse, error) {
	r, err := s.verify(ctx, req, nil)
	if err != nil {
		return nil, s.toStatus(err)
	}
	return &verifierv1.VerifyResponse{Report: r}, nil
}

// VerifyStream implements verifierv1.VerifierServiceServer.
func (s *Server) VerifyStream(sreq *verifierv1.VerifyStreamRequest, stream grpc.ServerStreamingServer[verifierv1.VerifyStreamResponse]) error {
	// The two requests are wire-identical (the contract keeps them in step).
	b, err := proto.Marshal(sreq)
	if err != nil {
		return s.toStatus(err)
	}
	req := new(verifierv1.VerifyRequest)
	if err := proto.Unmarshal(b, req); err != nil {
		return s.toStatus(err)
	}
	_, err = s.verify(stream.Context(), req, stream.Send)
	if err != nil {
		return s.toStatus(err)
	}
	return nil
}

// GetReport implements verifierv1.VerifierServiceServer.
func (s *Server) GetReport(ctx context.Context, req *verifierv1.GetReportRequest) (*verifierv1.GetReportResponse, error) {
	r, err := s.store.GetReport(ctx, req.GetId())
	if err != nil {
		return nil, s.toStatus(reportNotFound(req.GetId(), err))
	}
	out := r.VerifyReport
	if req.GetView() == verifierv1.ReportView_REPORT_VIEW_SUMMARY {
		out = report.Summary(out)
	}
	return &verifierv1.GetReportResponse{Report: out}, nil
}

// ListReports implements verifierv1.VerifierServiceServer.
func (s *Server) ListReports(ctx context.Context, req *verifierv1.ListReportsRequest) (*verifierv1.ListReportsResponse, error) {
	size := int(req.GetPageSize())
	if size == 0 {
		size = defaultPageSize
	}
	q := store.ListQuery{
		LoopKey: req.GetLoopKey(),
		Verdict: req.GetVerdict(),
		Limit:   size + 1,
		Summary: req.GetView() != verifierv1.ReportView_REPORT_VIEW_FULL,
	}
	var after store.Cursor
	if ok, err := pagetoken.Decode(req.GetPageToken(), req, &after); err != nil {
		return nil, err
	} else if ok {
		q.After = &after
	}
	reports, err := s.store.ListReports(ctx, q)
	if err != nil {
		return nil, s.toStatus(err)
	}
	res := &verifierv1.ListReportsResponse{Reports: reports}
	if len(reports) > size {
		res.Reports = reports[:size]
		last := res.Reports[size-1]
		res.NextPageToken = pagetoken.Encode(req, store.Cursor{CreateTime: last.GetCreateTime().AsTime(), ID: last.GetId()})
	}
	return res, nil
}

// AnalyzeThrashing implements verifierv1.VerifierServiceServer.
func (s *Server) AnalyzeThrashing(ctx context.Context, req *verifierv1.AnalyzeThrashingRequest) (*verifierv1.AnalyzeThrashingResponse, error) {
	window := int(req.GetWindow())
	if window == 0 {
		window = defaultThrashWindow
	}
	window = min(window, maxReportsPerAnalysis)
	latest, err := s.store.LatestReports(ctx, req.GetLoopKey(), window)
	if err != nil {
		return nil, s.toStatus(err)
	}
	if len(latest) == 0 {
		return nil, s.toStatus(&noCompleteReportError{loopKey: req.GetLoopKey()})
	}
	signoffs, err := s.store.Signoffs(ctx, req.GetLoopKey(), latest[0].Seq)
	if err != nil {
		return nil, s.toStatus(err)
	}
	loop := report.LoopVerdict(latest[0].VerifyReport, signoffs)
	oldestFirst := make([]*verifierv1.VerifyReport, len(latest))
	for i, r := range latest {
		oldestFirst[len(latest)-1-i] = r.VerifyReport
	}
	return report.Analyze(req.GetLoopKey(), oldestFirst, loop), nil
}

// RecordHumanVerdict implements verifierv1.VerifierServiceServer.
func (s *Server) RecordHumanVerdict(ctx context.Context, req *verifierv1.RecordHumanVerdictRequest) (*verifierv1.RecordHumanVerdictResponse, error) {
	loopKey := req.GetLoopKey()
	latest, err := s.store.LatestReports(ctx, loopKey, 1)
	if err != nil {
		return nil, s.toStatus(err)
	}
	if len(latest) == 0 {
		return nil, s.toStatus(&noCompleteReportError{loopKey: loopKey})
	}
	reviewed := latest[0]
	if id := req.GetReportId(); id != "" {
		r, err := s.store.GetReport(ctx, id)
		if err != nil {
			return nil, s.toStatus(reportNotFound(id, err))
		}
		if r.GetLoopKey() != loopKey {
			return nil, s.toStatus(&reportOfOtherLoopError{id: id, loopKey: loopKey})
		}
		reviewed = r
	}
	var found *verifierv1.CriterionResult
	for _, res := range reviewed.GetResults() {
		if res.GetCriterionId() == req.GetCriterionId() {
			found = res
			break
		}
	}
	switch {
	case found == nil:
		return nil, s.toStatus(preconditionf("criterion %s is not in report %s (iteration %d) of loop %s",
			req.GetCriterionId(), reviewed.GetId(), reviewed.GetIteration(), loopKey))
	case found.GetTag() != verifierv1.CriterionTag_CRITERION_TAG_HUMAN_VERIFY:
		return nil, s.toStatus(preconditionf("criterion %s is %s in report %s: only HUMAN_VERIFY criteria take a human verdict, automatic checks cannot be overridden",
			req.GetCriterionId(), store.ShortName(found.GetTag()), reviewed.GetId()))
	}
	hv, err := s.store.InsertHumanVerdict(ctx, &verifierv1.HumanVerdict{
		Id:          ids.New("hv", s.cfg.now()),
		LoopKey:     loopKey,
		CriterionId: req.GetCriterionId(),
		Decision:    req.GetDecision(),
		Who:         verdictWho(ctx, req.GetWho()),
		Note:        req.GetNote(),
		ReportId:    reviewed.GetId(),
	})
	if err != nil {
		return nil, s.toStatus(err)
	}
	signoffs, err := s.store.Signoffs(ctx, loopKey, latest[0].Seq)
	if err != nil {
		return nil, s.toStatus(err)
	}
	loop := report.LoopVerdict(latest[0].VerifyReport, signoffs)
	s.cfg.logger.InfoContext(ctx, "human verdict recorded", "loop_key", loopKey, "criterion", req.GetCriterionId(),
		"decision", store.ShortName(req.GetDecision()), "who", hv.GetWho(), "loop_verdict", store.ShortName(loop.GetVerdict()))
	return &verifierv1.RecordHumanVerdictResponse{HumanVerdict: hv, Loop: loop}, nil
}

// ListHumanVerdicts implements verifierv1.VerifierServiceServer.
func (s *Server) ListHumanVerdicts(ctx context.Context, req *verifierv1.ListHumanVerdictsRequest) (*verifierv1.ListHumanVerdictsResponse, error) {
	size := int(req.GetPageSize())
	if size == 0 {
		size = defaultHumanPageSize
	}
	q := store.HumanQuery{LoopKey: req.GetLoopKey(), CriterionID: req.GetCriterionId(), Limit: size + 1}
	if _, err := pagetoken.Decode(req.GetPageToken(), req, &q.AfterID); err != nil {
		return nil, err
	}
	list, err := s.store.ListHumanVerdicts(ctx, q)
	if err != nil {
		return nil, s.toStatus(err)
	}
	res := &verifierv1.ListHumanVerdictsResponse{HumanVerdicts: list}
	if len(list) > size {
		res.HumanVerdicts = list[:size]
		res.NextPageToken = pagetoken.Encode(req, list[size-1].GetId())
	}
	return res, nil
}

// verdictWho is who signed a verdict off: the authenticated principal, with the request's who in
// parentheses when it says something else; the request's who on a server that authenticates
// nobody.
func verdictWho(ctx context.Context, given string) string {
	p, ok := auth.FromContext(ctx)
	switch {
	case !ok:
		return given
	case given == "" || given == p.Name:
		return p.Name
	}
	return p.Name + " (" + given + ")"
}
