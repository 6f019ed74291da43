package server

import (
	"fmt"
	"strings"
	"testing"

	"buf.build/go/protovalidate"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/status"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
)

// grants is a ReleaseLocksRequest of the grants (resource, token) of a holder.
func grants(pairs ...any) *registryv1.ReleaseLocksRequest {
	req := &registryv1.ReleaseLocksRequest{Holder: "agent-1"}
	for i := 0; i < len(pairs); i += 2 {
		req.Locks = append(req.Locks, &registryv1.LockGrant{Resource: pairs[i].(string), Token: int64(pairs[i+1].(int))})
	}
	return req
}

// batchOf is a valid ReleaseLocksRequest of n grants.
func batchOf(n int) *registryv1.ReleaseLocksRequest {
	req := &registryv1.ReleaseLocksRequest{Holder: "agent-1"}
	for i := range n {
		req.Locks = append(req.Locks, &registryv1.LockGrant{Resource: fmt.Sprintf("src/f%d.go", i), Token: int64(i + 1)})
	}
	return req
}

// TestMsgListFastPathAgreesWithCEL: ReleaseLocksRequest.locks takes the message-list fast path,
// and every list, good or bad, validates exactly as protovalidate validates it without the fast
// path (the same status, message and violations), the good ones without protovalidate.
func TestMsgListFastPathAgreesWithCEL(t *testing.T) {
	t.Parallel()
	requireFastKinds(t, []fastKindCase{{&registryv1.ReleaseLocksRequest{}, "locks", fastMsgList}})
	v, err := protovalidate.New()
	require.NoError(t, err)
	dup33 := batchOf(33)
	dup33.Locks[32].Resource = dup33.Locks[3].Resource
	cases := []struct {
		req  *registryv1.ReleaseLocksRequest
		fast bool
	}{
		{batchOf(1), true},
		{batchOf(8), true},
		{batchOf(33), true},
		{batchOf(1000), true},
		{batchOf(1001), false},
		{batchOf(0), false},
		{dup33, false},
		{grants("a.go", 1, "b.go", 2, "a.go", 3), false},
		{grants("a.go", 1, "b.go", 0), false},
		{grants("a.go", -4), false},
		{grants("", 1), false},
		{grants("../x.go", 1), false},
		{grants("a/.git/x", 1), false},
		{grants("/abs.go", 1), false},
		{grants("é.go", 1), false},
		{grants("a.go", 0, "a.go", 0), false},
	}
	fd := (&registryv1.ReleaseLocksRequest{}).ProtoReflect().Descriptor().Fields().ByName("locks")
	for _, c := range cases {
		want := validateWith(v, c.req)
		got := validateWith(v, c.req, pathOptions...)
		name := fmt.Sprintf("%d grants %.60v", len(c.req.GetLocks()), c.req.GetLocks())
		require.Equal(t, status.Convert(want).Proto().String(), status.Convert(got).Proto().String(), name)
		require.Equal(t, c.fast, !shouldValidate(c.req.ProtoReflect(), fd), name)
	}
}

// TestMsgListFastPathAllocations: a task's 8 grants validate without protovalidate's CEL
// comprehension (about a dozen allocations per grant before the fast path).
func TestMsgListFastPathAllocations(t *testing.T) {
	v, err := protovalidate.New()
	require.NoError(t, err)
	req := batchOf(8)
	require.NoError(t, validate(v, req))
	allocs := testing.AllocsPerRun(100, func() { _ = validate(v, req) })
	require.LessOrEqual(t, allocs, 8.0, "allocations validating a ReleaseLocksRequest of 8 grants")
}

// TestMsgListFastPathCheckpointFiles: Checkpoint.files (items of two fastrule.go strings, no
// uniqueness) takes the fast path too, and agrees with protovalidate.
func TestMsgListFastPathCheckpointFiles(t *testing.T) {
	t.Parallel()
	requireFastKinds(t, []fastKindCase{{&commonv1.Checkpoint{}, "files", fastMsgList}})
	v, err := protovalidate.New()
	require.NoError(t, err)
	sum := strings.Repeat("ab", 32)
	files := func(n int, path, sha string) *commonv1.Checkpoint {
		c := &commonv1.Checkpoint{Id: "cp"}
		for i := range n {
			c.Files = append(c.Files, &commonv1.FileHash{Path: fmt.Sprintf("src/f%d.go", i), Sha256: sum})
		}
		c.Files = append(c.Files, &commonv1.FileHash{Path: path, Sha256: sha})
		return c
	}
	fd := (&commonv1.Checkpoint{}).ProtoReflect().Descriptor().Fields().ByName("files")
	for _, c := range []struct {
		msg  *commonv1.Checkpoint
		fast bool
	}{
		{files(0, "a.go", sum), true},
		{files(7, "a.go", ""), true},
		{files(7, "a.go", sum), true},
		{files(9999, "a.go", sum), true},
		{files(10000, "a.go", sum), false},
		{files(3, "", sum), false},
		{files(3, "a\x01.go", sum), false},
		{files(3, strings.Repeat("a", 1025), sum), false},
		{files(3, "a.go", "AB"), false},
		{files(3, "a.go", sum+"0"), false},
	} {
		want := validateWith(v, c.msg)
		got := validateWith(v, c.msg, pathOptions...)
		name := fmt.Sprintf("%d files, last %.40q %.10q", len(c.msg.GetFiles()), c.msg.GetFiles()[len(c.msg.GetFiles())-1].GetPath(), c.msg.GetFiles()[len(c.msg.GetFiles())-1].GetSha256())
		require.Equal(t, status.Convert(want).Proto().String(), status.Convert(got).Proto().String(), name)
		require.Equal(t, c.fast, !shouldValidate(c.msg.ProtoReflect(), fd), name)
	}
}
