package pagetoken_test

import (
	"encoding/base64"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/platform/pagetoken"
)

type cursor struct {
	Time time.Time `json:"t"`
	ID   string    `json:"id"`
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	req := &registryv1.ListAgentsRequest{ExecutionId: "ex_1", Statuses: []commonv1.AgentStatus{commonv1.AgentStatus_AGENT_STATUS_RUNNING}, PageSize: 10}
	in := cursor{Time: time.Date(2026, 11, 24, 22, 0, 0, 123456789, time.UTC), ID: "ag_7"}
	tok := pagetoken.Encode(req, in)

	// The next request carries the token and may change its page size.
	next := &registryv1.ListAgentsRequest{ExecutionId: "ex_1", Statuses: req.Statuses, PageSize: 50, PageToken: tok}
	var out cursor
	ok, err := pagetoken.Decode(tok, next, &out)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, in, out)

	ok, err = pagetoken.Decode("", next, &out)
	require.NoError(t, err)
	require.False(t, ok)
}

func TestOtherFilters(t *testing.T) {
	t.Parallel()
	req := &registryv1.ListAgentsRequest{ExecutionId: "ex_1"}
	tok := pagetoken.Encode(req, cursor{ID: "a"})
	var out cursor
	for _, other := range []*registryv1.ListAgentsRequest{
		{ExecutionId: "ex_2"},
		{ExecutionId: "ex_1", Statuses: []commonv1.AgentStatus{commonv1.AgentStatus_AGENT_STATUS_IDLE}},
		{},
	} {
		_, err := pagetoken.Decode(tok, other, &out)
		requireTokenError(t, err, pagetoken.ReasonOtherFilters)
	}
	// Another List RPC with the same filter values.
	_, err := pagetoken.Decode(pagetoken.Encode(&registryv1.ListLocksRequest{}, cursor{ID: "a"}), &registryv1.ListOwnersRequest{}, &out)
	requireTokenError(t, err, pagetoken.ReasonOtherFilters)
}

func TestMalformed(t *testing.T) {
	t.Parallel()
	req := &registryv1.ListLocksRequest{Prefix: "src/"}
	tok := pagetoken.Encode(req, cursor{ID: "a"})
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	require.NoError(t, err)
	edited := append([]byte(nil), raw...)
	edited[len(edited)-10] ^= 1 // a byte of the cursor
	versioned := append([]byte(nil), raw...)
	versioned[0] = 9
	var out cursor
	for _, bad := range []string{
		"not base64!",
		"AAAA",
		tok[:len(tok)-3],
		base64.RawURLEncoding.EncodeToString(edited),
		base64.RawURLEncoding.EncodeToString(versioned),
		"djF8MTIzfGFiYw", // the Scheduler's former v1|ns|id tokens
	} {
		_, err := pagetoken.Decode(bad, req, &out)
		requireTokenError(t, err, pagetoken.ReasonMalformed)
	}
	// A well-formed token whose cursor does not fit the type asked for.
	_, err = pagetoken.Decode(pagetoken.Encode(req, "a string"), req, &out)
	requireTokenError(t, err, pagetoken.ReasonMalformed)
}

func requireTokenError(t *testing.T, err error, reason string) {
	t.Helper()
	var tokErr *pagetoken.Error
	require.ErrorAs(t, err, &tokErr)
	require.Equal(t, reason, tokErr.Reason)
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Equal(t, []grpcerr.FieldViolation{{Field: "page_token", Description: reason}}, grpcerr.Violations(err))
}
