package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// File is an auth file (--auth-file, CONVERGE_AUTH_FILE), in YAML or JSON:
//
//	principals:
//	  - name: ops-alice
//	    roles: [operator]
//	    token_sha256: ["9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"]
//	  - name: agent-pool-a
//	    roles: [agent]
//	    token_sha256: ["..."]
//	    certificates:
//	      - {cn: agent-pool-a}
//	      - {uri: "spiffe://example.org/agents/pool-a"}
//	      - {dns: pool-a.agents.example.org}
//
// Tokens are stored as the hex SHA-256 of the token (`converge auth hash-token`), never in clear.
// A certificate entry matches a verified client certificate whose subject CN, or one of whose
// URI or DNS SANs, equals every field the entry sets.
type File struct {
	// Principals are the callers the server knows.
	Principals []FilePrincipal `yaml:"principals" json:"principals"`
}

// FilePrincipal is one principal of an auth file.
type FilePrincipal struct {
	// Name identifies the principal (logs, provenance, identity binding).
	Name string `yaml:"name" json:"name"`
	// Roles are what it may do.
	Roles []Role `yaml:"roles" json:"roles"`
	// TokenSHA256 are the hex SHA-256 hashes of its bearer tokens.
	TokenSHA256 []string `yaml:"token_sha256" json:"token_sha256"`
	// Certificates are the mTLS client certificate identities that authenticate as it.
	Certificates []CertIdentity `yaml:"certificates" json:"certificates"`
}

// CertIdentity matches a client certificate: every field set must match.
type CertIdentity struct {
	// CN is the subject common name.
	CN string `yaml:"cn" json:"cn"`
	// URI is a URI SAN, e.g. a SPIFFE id.
	URI string `yaml:"uri" json:"uri"`
	// DNS is a DNS SAN.
	DNS string `yaml:"dns" json:"dns"`
}

func (c CertIdentity) empty() bool { return c.CN == "" && c.URI == "" && c.DNS == "" }

func (c CertIdentity) matches(cert *x509.Certificate) bool {
	if c.empty() {
		return false
	}
	if c.CN != "" && cert.Subject.CommonName != c.CN {
		return false
	}
	if c.URI != "" && !slices.ContainsFunc(cert.URIs, func(u *url.URL) bool { return u.String() == c.URI }) {
		return false
	}
	if c.DNS != "" && !slices.Contains(cert.DNSNames, c.DNS) {
		return false
	}
	return true
}

// principalName is what a principal may be called: printable, no spaces (it goes into logs and
// stored provenance).
var principalName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$`)

var hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Table is a loaded, checked set of principals: what a server authenticates callers against.
// It is immutable; a reload builds a new one.
type Table struct {
	byToken map[[sha256.Size]byte]Principal
	certs   []certEntry
	// certFallback, when set, is the principal of any verified client certificate that no entry
	// names (a server with mTLS and no auth file: every certificate its CA signed is an operator).
	certFallback bool
}

type certEntry struct {
	id CertIdentity
	p  Principal
}

// StaticTokenPrincipal is the principal of the plain tokens given with --auth-token /
// CONVERGE_AUTH_TOKENS (and of `converge dev`'s generated token): an operator. Give callers that
// should have less an auth file instead.
const StaticTokenPrincipal = "operator"

// ParseFile parses and checks an auth file's content (YAML or JSON).
func ParseFile(data []byte) (*File, error) {
	var f File
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("auth file: %w", err)
	}
	return &f, f.check()
}

func (f *File) check() error {
	names := map[string]bool{}
	hashes := map[string]string{}
	for i, p := range f.Principals {
		where := fmt.Sprintf("auth file: principals[%d]", i)
		if !principalName.MatchString(p.Name) {
			return fmt.Errorf("%s: name %q: want 1-128 of letters, digits and ._:@/- starting with a letter or digit", where, p.Name)
		}
		if names[p.Name] {
			return fmt.Errorf("%s: name %q is given twice", where, p.Name)
		}
		names[p.Name] = true
		if len(p.Roles) == 0 {
			return fmt.Errorf("%s (%s): no roles: give at least one of %s", where, p.Name, roleList())
		}
		for _, r := range p.Roles {
			if !slices.Contains(Roles, r) {
				return fmt.Errorf("%s (%s): unknown role %q: want one of %s", where, p.Name, r, roleList())
			}
		}
		if len(p.TokenSHA256) == 0 && len(p.Certificates) == 0 {
			return fmt.Errorf("%s (%s): neither token_sha256 nor certificates: nobody could authenticate as it", where, p.Name)
		}
		for j, h := range p.TokenSHA256 {
			if !hexSHA256.MatchString(h) {
				return fmt.Errorf("%s (%s): token_sha256[%d]: want 64 lower-case hex digits (`converge auth hash-token`)", where, p.Name, j)
			}
			if other, ok := hashes[h]; ok {
				return fmt.Errorf("%s (%s): token_sha256[%d] is also a token of %s", where, p.Name, j, other)
			}
			hashes[h] = p.Name
		}
		for j, c := range p.Certificates {
			if c.empty() {
				return fmt.Errorf("%s (%s): certificates[%d]: set cn, uri or dns", where, p.Name, j)
			}
		}
	}
	return nil
}

func roleList() string {
	names := make([]string, len(Roles))
	for i, r := range Roles {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}

// LoadFile reads and checks the auth file at path.
func LoadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth file: %w", err)
	}
	f, err := ParseFile(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// NewTable builds the table of f (nil: none) plus the plain tokens (StaticTokenPrincipal). With
// certFallback, a verified client certificate no entry names authenticates as an operator named
// after its CN (the behaviour of an mTLS server without an auth file).
func NewTable(f *File, staticTokens []string, certFallback bool) (*Table, error) {
	t := &Table{byToken: map[[sha256.Size]byte]Principal{}, certFallback: certFallback}
	if f != nil {
		for _, fp := range f.Principals {
			p := Principal{Name: fp.Name, Roles: slices.Clone(fp.Roles)}
			for _, h := range fp.TokenSHA256 {
				var key [sha256.Size]byte
				if _, err := hex.Decode(key[:], []byte(h)); err != nil {
					return nil, fmt.Errorf("auth file: %s: token_sha256: %w", fp.Name, err)
				}
				t.byToken[key] = p
			}
			for _, c := range fp.Certificates {
				t.certs = append(t.certs, certEntry{id: c, p: p})
			}
		}
	}
	for i, tok := range staticTokens {
		if tok == "" {
			return nil, fmt.Errorf("auth token %d is empty", i)
		}
		key := sha256.Sum256([]byte(tok))
		if other, ok := t.byToken[key]; ok && other.Name != StaticTokenPrincipal {
			return nil, fmt.Errorf("auth token %d is also a token of %s in the auth file", i, other.Name)
		}
		t.byToken[key] = Principal{Name: StaticTokenPrincipal, Roles: []Role{RoleOperator}}
	}
	return t, nil
}

// HasTokens reports whether any bearer token authenticates.
func (t *Table) HasTokens() bool { return t != nil && len(t.byToken) > 0 }

// ByToken answers the principal of a presented bearer token. Tokens are looked up by their
// SHA-256, so the time taken does not depend on how much of a token an attacker guessed right.
func (t *Table) ByToken(token string) (Principal, bool) {
	if t == nil || token == "" {
		return Principal{}, false
	}
	p, ok := t.byToken[sha256.Sum256([]byte(token))]
	return p, ok
}

// ByCertificate answers the principal of a verified client certificate: the first entry that
// matches it, else (with the fallback) an operator named "cert:<CN>".
func (t *Table) ByCertificate(cert *x509.Certificate) (Principal, bool) {
	if t == nil || cert == nil {
		return Principal{}, false
	}
	for _, e := range t.certs {
		if e.id.matches(cert) {
			return e.p, true
		}
	}
	if t.certFallback {
		return Principal{Name: "cert:" + cert.Subject.CommonName, Roles: []Role{RoleOperator}}, true
	}
	return Principal{}, false
}

// HashToken answers the hex SHA-256 of token: what an auth file's token_sha256 holds.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// NewToken answers a fresh random bearer token (26 base32 characters, 130 bits).
func NewToken() string { return rand.Text() }
