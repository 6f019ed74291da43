package verifier

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/platform/grpcerr"
)

// This file is what a Verifier lets its callers do with its own process: which of its
// environment variables checks may read (env_passthrough, header_env, metadata_env: a
// server-side allow-list, deny by default), whether command checks run at all and for whom, and
// the redaction of the values checks read from the reports.

// minRedactLen is the shortest value redacted from reports: shorter ones ("1", "on") would
// mangle evidence without hiding anything worth hiding.
const minRedactLen = 4

// WithAllowedEnv sets the names of the verifier's environment variables that checks may read
// (env_passthrough, header_env, metadata_env). Every other name is refused (InvalidArgument
// naming it). None by default.
func WithAllowedEnv(names ...string) Option {
	return func(c *config) {
		if c.allowedEnv == nil {
			c.allowedEnv = map[string]bool{}
		}
		for _, n := range names {
			if n = strings.TrimSpace(n); n != "" {
				c.allowedEnv[n] = true
			}
		}
	}
}

// WithCommandChecks sets whether command checks run (default true); off, a request with one is
// FailedPrecondition.
func WithCommandChecks(allowed bool) Option { return func(c *config) { c.noCommandChecks = !allowed } }

// WithCommandCheckRole limits command checks to callers holding role (PermissionDenied for the
// others). A server that authenticates nobody (platform/auth.FromContext answers !ok) has no
// roles to check: its callers are trusted alike. "" (the default): any caller.
func WithCommandCheckRole(role auth.Role) Option { return func(c *config) { c.commandRole = role } }

// CheckAllowedEnv refuses names the Verifier must never hand to a check, whatever the operator
// says: its own settings (CONVERGE_*: tokens, the database URL).
func CheckAllowedEnv(names []string) error {
	for _, n := range names {
		if strings.HasPrefix(strings.TrimSpace(n), "CONVERGE_") {
			return fmt.Errorf("--allow-env %s: the verifier's own settings (CONVERGE_*) are never passed to checks", n)
		}
	}
	return nil
}

// permissionError is a caller whose principal may not do what it asked (PermissionDenied).
type permissionError struct{ msg string }

func (e *permissionError) Error() string { return e.msg }

// checkPolicy checks the criteria that run against what this verifier lets its callers do, and
// answers the verifier's environment values the checks will read (to be redacted).
func (s *Server) checkPolicy(ctx context.Context, req *verifierv1.VerifyRequest, crit []*verifierv1.Criterion, run []bool) (*redactor, error) {
	bad := &badRequestError{request: "VerifyRequest"}
	red := &redactor{}
	var commands []string
	for i, c := range crit {
		if !run[i] {
			continue
		}
		field := func(path string) string {
			if req.GetCriteriaMarkdown() != "" {
				return fmt.Sprintf("criteria_markdown:L%d", c.GetSourceLine())
			}
			return fmt.Sprintf("criteria.criteria[%d].%s", i, path)
		}
		use := func(path, name, kind string) {
			if !s.cfg.allowedEnv[name] {
				bad.violations = append(bad.violations, fieldViolation(field(path),
					"%s: %s names the verifier's variable %s, which is not on its allow-list: ask its operator to add it (--allow-env), or give the value in the criterion",
					c.GetId(), kind, name))
				return
			}
			if v, ok := s.cfg.lookupEnv(name); ok {
				red.add(name, v)
			}
		}
		switch {
		case c.GetCommand() != nil:
			commands = append(commands, c.GetId())
			for j, name := range c.GetCommand().GetEnvPassthrough() {
				use(fmt.Sprintf("command.env_passthrough[%d]", j), name, "env_passthrough")
			}
		case c.GetHttp() != nil:
			for _, h := range sortedKeys(c.GetHttp().GetHeaderEnv()) {
				use(fmt.Sprintf("http.header_env[%q]", h), c.GetHttp().GetHeaderEnv()[h], "header_env")
			}
		case c.GetGrpc() != nil:
			for _, k := range sortedKeys(c.GetGrpc().GetMetadataEnv()) {
				use(fmt.Sprintf("grpc.metadata_env[%q]", k), c.GetGrpc().GetMetadataEnv()[k], "metadata_env")
			}
		}
	}
	if len(commands) > 0 {
		if s.cfg.noCommandChecks {
			return nil, preconditionf("this verifier runs no command checks (it was started with --allow-command-checks=false): "+
				"criteria %s have one; use http, grpc or file checks, or a verifier that runs commands", strings.Join(commands, ", "))
		}
		if role := s.cfg.commandRole; role != "" {
			if p, ok := auth.FromContext(ctx); ok && !p.Has(role) {
				return nil, &permissionError{msg: fmt.Sprintf("command checks on this verifier are for callers with the %s role; "+
					"%s has not got it (criteria %s): use http, grpc or file checks, or ask its operator", role, p.Name, strings.Join(commands, ", "))}
			}
		}
	}
	if len(bad.violations) > 0 {
		return nil, bad
	}
	return red, nil
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// redactor replaces the values of the verifier's variables that checks read with a marker
// naming the variable, in every string of a result or report: a check that prints its token, or
// a server that echoes a header, does not put it in the store or in the caller's hands.
type redactor struct {
	names, values []string
}

func (r *redactor) add(name, value string) {
	if len(value) < minRedactLen {
		return
	}
	r.names, r.values = append(r.names, name), append(r.values, value)
}

// redact rewrites every string field of m (recursively) in place.
func (r *redactor) redact(m proto.Message) {
	if r == nil || len(r.values) == 0 || m == nil {
		return
	}
	r.message(m.ProtoReflect())
}

func (r *redactor) text(s string) string {
	for i, v := range r.values {
		if strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, "[redacted "+r.names[i]+"]")
		}
	}
	return s
}

func (r *redactor) message(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if fd.Kind() == protoreflect.StringKind {
					l.Set(i, protoreflect.ValueOfString(r.text(l.Get(i).String())))
				} else if fd.Kind() == protoreflect.MessageKind {
					r.message(l.Get(i).Message())
				}
			}
		case fd.IsMap():
			mp := v.Map()
			var sets []func()
			mp.Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				switch fd.MapValue().Kind() {
				case protoreflect.StringKind:
					nv := protoreflect.ValueOfString(r.text(mv.String()))
					sets = append(sets, func() { mp.Set(k, nv) })
				case protoreflect.MessageKind:
					r.message(mv.Message())
				}
				return true
			})
			for _, set := range sets {
				set()
			}
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString(r.text(v.String())))
		case fd.Kind() == protoreflect.MessageKind:
			r.message(v.Message())
		}
		return true
	})
}

func fieldViolation(field, format string, args ...any) grpcerr.FieldViolation {
	return grpcerr.FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)}
}
