package auth_test

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/auth"
)

const sampleYAML = `
principals:
  - name: ops-alice
    roles: [operator]
    token_sha256: ["%s"]
  - name: agent-pool-a
    roles: [agent]
    token_sha256: ["%s"]
    certificates:
      - {cn: agent-pool-a}
      - {uri: "spiffe://example.org/agents/pool-a"}
  - name: team-b
    roles: [verify-client, knowledge-client]
    certificates:
      - {dns: team-b.example.org, cn: team-b}
`

func sample(t *testing.T) *auth.File {
	t.Helper()
	f, err := auth.ParseFile([]byte(fmt.Sprintf(sampleYAML, auth.HashToken("alice-secret"), auth.HashToken("pool-secret"))))
	require.NoError(t, err)
	return f
}

func TestAuthFileTokens(t *testing.T) {
	t.Parallel()
	table, err := auth.NewTable(sample(t), []string{"plain-token"}, false)
	require.NoError(t, err)

	p, ok := table.ByToken("alice-secret")
	require.True(t, ok)
	require.Equal(t, auth.Principal{Name: "ops-alice", Roles: []auth.Role{auth.RoleOperator}}, p)
	p, ok = table.ByToken("pool-secret")
	require.True(t, ok)
	require.Equal(t, "agent-pool-a", p.Name)
	require.True(t, p.Has(auth.RoleAgent))
	require.False(t, p.Has(auth.RoleOperator))

	// The plain --auth-token tokens are the operator principal.
	p, ok = table.ByToken("plain-token")
	require.True(t, ok)
	require.Equal(t, auth.Principal{Name: auth.StaticTokenPrincipal, Roles: []auth.Role{auth.RoleOperator}}, p)

	for _, bad := range []string{"", "alice-secre", "alice-secret ", auth.HashToken("alice-secret")} {
		_, ok := table.ByToken(bad)
		require.False(t, ok, "token %q", bad)
	}
}

func TestAuthFileCertificates(t *testing.T) {
	t.Parallel()
	table, err := auth.NewTable(sample(t), nil, false)
	require.NoError(t, err)
	spiffe, err := url.Parse("spiffe://example.org/agents/pool-a")
	require.NoError(t, err)

	for _, tc := range []struct {
		name string
		cert *x509.Certificate
		want string
	}{
		{"ByCN", &x509.Certificate{Subject: pkix.Name{CommonName: "agent-pool-a"}}, "agent-pool-a"},
		{"ByURISAN", &x509.Certificate{Subject: pkix.Name{CommonName: "whatever"}, URIs: []*url.URL{spiffe}}, "agent-pool-a"},
		{"ByCNAndDNS", &x509.Certificate{Subject: pkix.Name{CommonName: "team-b"}, DNSNames: []string{"x", "team-b.example.org"}}, "team-b"},
		{"DNSWithoutCN", &x509.Certificate{Subject: pkix.Name{CommonName: "other"}, DNSNames: []string{"team-b.example.org"}}, ""},
		{"Unknown", &x509.Certificate{Subject: pkix.Name{CommonName: "ops-alice"}}, ""},
	} {
		p, ok := table.ByCertificate(tc.cert)
		require.Equal(t, tc.want != "", ok, tc.name)
		require.Equal(t, tc.want, p.Name, tc.name)
	}

	// Without an auth file nor tokens (mTLS alone), any verified certificate is an operator.
	open, err := auth.NewTable(nil, nil, true)
	require.NoError(t, err)
	p, ok := open.ByCertificate(&x509.Certificate{Subject: pkix.Name{CommonName: "ci"}})
	require.True(t, ok)
	require.Equal(t, auth.Principal{Name: "cert:ci", Roles: []auth.Role{auth.RoleOperator}}, p)
}

func TestAuthFileJSON(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "auth.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"principals": [{"name": "dash", "roles": ["read-only"], "token_sha256": ["`+auth.HashToken("d")+`"]}]}`), 0o600))
	f, err := auth.LoadFile(path)
	require.NoError(t, err)
	require.Equal(t, "dash", f.Principals[0].Name)
	require.Equal(t, []auth.Role{auth.RoleReadOnly}, f.Principals[0].Roles)
}

func TestAuthFileRefused(t *testing.T) {
	t.Parallel()
	h := auth.HashToken("x")
	for _, tc := range []struct{ name, doc, want string }{
		{"UnknownRole", `principals: [{name: a, roles: [admin], token_sha256: ["` + h + `"]}]`, `unknown role "admin"`},
		{"NoRoles", `principals: [{name: a, token_sha256: ["` + h + `"]}]`, "no roles"},
		{"NoCredentials", `principals: [{name: a, roles: [agent]}]`, "neither token_sha256 nor certificates"},
		{"ClearToken", `principals: [{name: a, roles: [agent], token_sha256: ["hunter2"]}]`, "want 64 lower-case hex digits"},
		{"SharedToken", `principals: [{name: a, roles: [agent], token_sha256: ["` + h + `"]}, {name: b, roles: [agent], token_sha256: ["` + h + `"]}]`, "also a token of a"},
		{"DuplicateName", `principals: [{name: a, roles: [agent], token_sha256: ["` + h + `"]}, {name: a, roles: [agent], certificates: [{cn: a}]}]`, "given twice"},
		{"BadName", `principals: [{name: "a b", roles: [agent], token_sha256: ["` + h + `"]}]`, "name \"a b\""},
		{"EmptyCertificate", `principals: [{name: a, roles: [agent], certificates: [{}]}]`, "set cn, uri or dns"},
		{"UnknownField", `principals: [{name: a, roles: [agent], token: "x"}]`, "field token not found"},
	} {
		_, err := auth.ParseFile([]byte(tc.doc))
		require.ErrorContains(t, err, tc.want, tc.name)
	}
	_, err := auth.LoadFile(filepath.Join(t.TempDir(), "missing.yaml"))
	require.ErrorContains(t, err, "no such file")
}

func TestHashToken(t *testing.T) {
	t.Parallel()
	require.Equal(t, "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", auth.HashToken("test"))
	a, b := auth.NewToken(), auth.NewToken()
	require.NotEqual(t, a, b)
	require.GreaterOrEqual(t, len(a), 26)
}
