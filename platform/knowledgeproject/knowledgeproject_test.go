package knowledgeproject_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/knowledgeproject"
)

// One repository is one Knowledge project however its URL is written; different ones are not.
func TestOf(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"https://github.com/acme/shop.git", "https://u:secret@GitHub.com:443/acme/shop/",
		"ssh://git@github.com/acme/shop", "git@github.com:acme/shop.git"} {
		require.Equal(t, "github.com/acme/shop", knowledgeproject.Of(u, "", ""), u)
	}
	require.Equal(t, "github.com/acme/other", knowledgeproject.Of("https://github.com/acme/other", "/ignored", "tl_1"))
	require.Equal(t, "/srv/repos/app", knowledgeproject.Of("", "/srv/repos/app/", "tl_1"))
	require.Equal(t, "tasklist:tl_1", knowledgeproject.Of("", "", "tl_1"))
	require.Regexp(t, `^sha256:[0-9a-f]{64}$`, knowledgeproject.Of("", "/"+strings.Repeat("d/", 400), ""), "an identity Knowledge would refuse is hashed")
}
