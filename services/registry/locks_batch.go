package registry

import (
	"context"
	"errors"
	"fmt"
	"strings"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/repopath"
	"github.com/converge-dev/converge/services/registry/hot"
)

// AcquireLocks grants a batch of locks to one holder, all or nothing (hot.Locks.AcquireAll).
func (s *Server) AcquireLocks(ctx context.Context, req *registryv1.AcquireLocksRequest) (*registryv1.AcquireLocksResponse, error) {
	const msg = "AcquireLocksRequest"
	resources, err := cleanBatch(msg, "resources[%d]", len(req.GetResources()), func(i int) string { return req.GetResources()[i] })
	if err != nil {
		return nil, err
	}
	ttl := req.GetTtl().AsDuration()
	if req.GetTtl() == nil || ttl <= 0 {
		return nil, invalid(msg, "ttl", "value is required")
	}
	if err := s.checkHolder(ctx, req.GetHolder()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	locks, conflict, granted, err := s.hot.AcquireAll(ctx, resources, req.GetHolder(), ttl, req.GetWait().AsDuration())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if !granted {
		return &registryv1.AcquireLocksResponse{Conflict: lockProto(conflict)}, nil
	}
	res := &registryv1.AcquireLocksResponse{Granted: true, Locks: make([]*registryv1.Lock, len(locks))}
	for i, l := range locks {
		res.Locks[i] = lockProto(l)
	}
	return res, nil
}

// ReleaseLocks frees the current grants of a batch of one holder (hot.Locks.ReleaseAll).
func (s *Server) ReleaseLocks(ctx context.Context, req *registryv1.ReleaseLocksRequest) (*registryv1.ReleaseLocksResponse, error) {
	const msg = "ReleaseLocksRequest"
	resources, err := cleanBatch(msg, "locks[%d].resource", len(req.GetLocks()), func(i int) string { return req.GetLocks()[i].GetResource() })
	if err != nil {
		return nil, err
	}
	grants := make([]hot.Grant, len(resources))
	for i, r := range resources {
		if req.GetLocks()[i].GetToken() <= 0 {
			return nil, invalid(msg, fmt.Sprintf("locks[%d].token", i), "value must be greater than 0")
		}
		grants[i] = hot.Grant{Resource: r, Token: req.GetLocks()[i].GetToken()}
	}
	if err := s.checkHolder(ctx, req.GetHolder()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	refused, err := s.hot.ReleaseAll(ctx, req.GetHolder(), grants)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	res := &registryv1.ReleaseLocksResponse{}
	for i, r := range refused {
		if r == nil {
			res.Released++
			continue
		}
		res.NotReleased = append(res.NotReleased, &registryv1.NotReleased{Resource: grants[i].Resource, Reason: refusalReason(r), Message: r.Error()})
	}
	return res, nil
}

// cleanBatch checks and normalises the n resources of a batch request (at(i) is the i-th, field
// the format of its field path): 1 to hot.MaxBatch distinct clean paths. protovalidate checks the
// same first; this is the service's own check, for callers that skip the interceptor.
func cleanBatch(msg, field string, n int, at func(int) string) ([]string, error) {
	list, _, _ := strings.Cut(field, "[")
	if n == 0 || n > hot.MaxBatch {
		return nil, invalid(msg, list, fmt.Sprintf("must hold 1 to %d items", hot.MaxBatch))
	}
	out := make([]string, n)
	seen := make(map[string]struct{}, n)
	for i := range n {
		r, err := repopath.Clean(at(i))
		if err != nil {
			return nil, invalidPath(msg, fmt.Sprintf(field, i), err)
		}
		if _, dup := seen[r]; dup {
			return nil, invalid(msg, fmt.Sprintf(field, i), "names a resource already in the batch: each at most once")
		}
		seen[r] = struct{}{}
		out[i] = r
	}
	return out, nil
}

// refusalReason answers the ReleaseRefusal of a ReleaseAll refusal.
func refusalReason(err error) registryv1.ReleaseRefusal {
	var (
		notHeld    *hot.NotHeldError
		stale      *hot.StaleTokenError
		wrongToken *hot.WrongTokenError
		other      *hot.HeldByOtherError
	)
	switch {
	case errors.As(err, &notHeld):
		return registryv1.ReleaseRefusal_RELEASE_REFUSAL_NOT_HELD
	case errors.As(err, &stale):
		return registryv1.ReleaseRefusal_RELEASE_REFUSAL_STALE_TOKEN
	case errors.As(err, &wrongToken):
		return registryv1.ReleaseRefusal_RELEASE_REFUSAL_WRONG_TOKEN
	case errors.As(err, &other):
		return registryv1.ReleaseRefusal_RELEASE_REFUSAL_HELD_BY_OTHER
	}
	return registryv1.ReleaseRefusal_RELEASE_REFUSAL_UNSPECIFIED
}
