// Package pagetokentest walks paginated List RPCs in services' tests and checks the refusals of
// platform/pagetoken.
package pagetokentest

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/platform/pagetoken"
)

// Page answers the ids of the page a token starts ("" for the first page) and the next page's
// token ("" after the last page). It fails the test on an error.
type Page func(token string) (ids []string, next string)

// Walk reads every page and answers all ids in order, checking that none comes twice, and the
// token of the second page ("" if there is one page).
func Walk(t testing.TB, page Page) (all []string, second string) {
	t.Helper()
	token := ""
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatal("pagetokentest: more than 10000 pages: the tokens do not move on")
		}
		ids, next := page(token)
		for _, id := range ids {
			if slices.Contains(all, id) {
				t.Fatalf("pagetokentest: %s listed twice", id)
			}
			all = append(all, id)
		}
		if next == "" {
			return all, second
		}
		if second == "" {
			second = next
		}
		token = next
	}
}

// RequireOtherFilters checks that err refuses a page token replayed with other filters.
func RequireOtherFilters(t testing.TB, err error) {
	t.Helper()
	requireReason(t, err, pagetoken.ReasonOtherFilters)
}

// RequireMalformed checks that err refuses a malformed page token.
func RequireMalformed(t testing.TB, err error) {
	t.Helper()
	requireReason(t, err, pagetoken.ReasonMalformed)
}

func requireReason(t testing.TB, err error, reason string) {
	t.Helper()
	if got := status.Code(err); got != codes.InvalidArgument {
		t.Fatalf("code %s, want InvalidArgument: %v", got, err)
	}
	for _, v := range grpcerr.Violations(err) {
		if v.Field == pagetoken.Field && v.Description == reason {
			return
		}
	}
	t.Fatalf("want a violation of page_token %q, got %v", reason, grpcerr.Violations(err))
}
