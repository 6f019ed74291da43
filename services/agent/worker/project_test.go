package worker

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// One repository is one Knowledge project however its URL is written; different ones are not.
func TestProjectOf(t *testing.T) {
	t.Parallel()
	byURL := func(u string) *schedulerv1.ClaimedAssignment {
		return &schedulerv1.ClaimedAssignment{Repository: &schedulerv1.Repository{Source: &schedulerv1.Repository_Url{Url: u}}}
	}
	for _, u := range []string{"https://github.com/acme/shop.git", "https://u:secret@GitHub.com:443/acme/shop/",
		"ssh://git@github.com/acme/shop", "git@github.com:acme/shop.git"} {
		require.Equal(t, "github.com/acme/shop", projectOf(byURL(u)), u)
	}
	require.Equal(t, "github.com/acme/other", projectOf(byURL("https://github.com/acme/other")))
	require.Equal(t, "/srv/repos/app", projectOf(&schedulerv1.ClaimedAssignment{
		Repository: &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: "/srv/repos/app/"}}}))
	require.Equal(t, "tasklist:tl_1", projectOf(&schedulerv1.ClaimedAssignment{TaskListId: "tl_1"}))
	long := projectOf(&schedulerv1.ClaimedAssignment{
		Repository: &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: "/" + strings.Repeat("d/", 400)}}})
	require.Regexp(t, `^sha256:[0-9a-f]{64}$`, long, "an identity Knowledge would refuse is hashed")
}
