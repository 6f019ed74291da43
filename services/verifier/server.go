// Package verifier is converge's Verifier service: see DESIGN.md §1.
package verifier

import (
	"context"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"

	"github.com/converge-dev/converge/services/verifier/store"
	"google.golang.org/grpc"
)

// Server implements verifierv1.VerifierServiceServer on a store.
type Server struct {
	verifierv1.UnimplementedVerifierServiceServer
	store store.Store
}

// New returns the Verifier service on st.
func New(st store.Store) *Server { return &Server{store: st} }

var _ verifierv1.VerifierServiceServer = (*Server)(nil)

// ParseCriteria answers Unimplemented until the Verifier issue (#4) builds it: the done-criteria parser.
func (s *Server) ParseCriteria(context.Context, *verifierv1.ParseCriteriaRequest) (*verifierv1.ParseCriteriaResponse, error) {
	return nil, unimplemented("ParseCriteria", "the done-criteria parser")
}

// Verify answers Unimplemented until the Verifier issue (#4) builds it: running checks and Verify Done verdicts.
func (s *Server) Verify(context.Context, *verifierv1.VerifyRequest) (*verifierv1.VerifyResponse, error) {
	return nil, unimplemented("Verify", "running checks and Verify Done verdicts")
}

// VerifyStream answers Unimplemented until the Verifier issue (#4) builds it: running checks and Verify Done verdicts.
func (s *Server) VerifyStream(*verifierv1.VerifyStreamRequest, grpc.ServerStreamingServer[verifierv1.VerifyStreamResponse]) error {
	return unimplemented("VerifyStream", "running checks and Verify Done verdicts")
}

// GetReport answers Unimplemented until the Verifier issue (#4) builds it: verify report history.
func (s *Server) GetReport(context.Context, *verifierv1.GetReportRequest) (*verifierv1.GetReportResponse, error) {
	return nil, unimplemented("GetReport", "verify report history")
}

// ListReports answers Unimplemented until the Verifier issue (#4) builds it: verify report history.
func (s *Server) ListReports(context.Context, *verifierv1.ListReportsRequest) (*verifierv1.ListReportsResponse, error) {
	return nil, unimplemented("ListReports", "verify report history")
}

// AnalyzeThrashing answers Unimplemented until the Verifier issue (#4) builds it: anti-thrashing analysis.
func (s *Server) AnalyzeThrashing(context.Context, *verifierv1.AnalyzeThrashingRequest) (*verifierv1.AnalyzeThrashingResponse, error) {
	return nil, unimplemented("AnalyzeThrashing", "anti-thrashing analysis")
}

// RecordHumanVerdict answers Unimplemented until the Verifier issue (#4) builds it: human sign-off.
func (s *Server) RecordHumanVerdict(context.Context, *verifierv1.RecordHumanVerdictRequest) (*verifierv1.RecordHumanVerdictResponse, error) {
	return nil, unimplemented("RecordHumanVerdict", "human sign-off")
}

// ListHumanVerdicts answers Unimplemented until the Verifier issue (#4) builds it: human sign-off.
func (s *Server) ListHumanVerdicts(context.Context, *verifierv1.ListHumanVerdictsRequest) (*verifierv1.ListHumanVerdictsResponse, error) {
	return nil, unimplemented("ListHumanVerdicts", "human sign-off")
}
