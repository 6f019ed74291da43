// Package dashboard is converge's web dashboard: server-rendered html/template pages with a little
// plain JavaScript (embedded, no CDN, no request to any other host) that read and steer a
// deployment only through the services' public gRPC APIs — the same calls grpcurl makes — so it
// works against any deployment, not just `converge dev`.
//
// Permissions are the API's: every call carries the operator's bearer token (signed in through
// /login, kept in an HttpOnly SameSite=Strict cookie, or sent as an Authorization header). Reads
// without an operator token use Options.ReadToken when one is configured (a read-only view);
// actions never do, so with tokens configured a viewer without a token can look but not act, and
// the dashboard is never weaker than the API.
package dashboard

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// tokenCookie holds the operator's bearer token.
const tokenCookie = "converge_token"

// Options configure a dashboard.
type Options struct {
	// ReadToken, when set, is sent with read calls made for a viewer who has not signed in: a
	// read-only view of a deployment that requires tokens. Actions never use it.
	ReadToken string
	// Logger logs failed calls; nil = slog.Default().
	Logger *slog.Logger
}

// Dashboard serves the pages. Make one with New.
type Dashboard struct {
	sched    schedulerv1.SchedulerServiceClient
	verifier verifierv1.VerifierServiceClient
	registry registryv1.RegistryServiceClient
	know     knowledgev1.KnowledgeServiceClient
	opts     Options
	log      *slog.Logger
	pages    map[string]*template.Template
	mux      *http.ServeMux
}

// New answers a dashboard that calls the services over c (connections to a deployment's
// services, with no credentials of their own: each call carries the viewer's token). The Scheduler
// is required; a service without a connection answers Unavailable on its pages.
func New(c Conns, opts Options) (*Dashboard, error) {
	if c.Scheduler == nil {
		return nil, errors.New("dashboard: no connection to the Scheduler")
	}
	d := &Dashboard{
		sched:    schedulerv1.NewSchedulerServiceClient(c.Scheduler),
		verifier: verifierv1.NewVerifierServiceClient(orMissing(c.Verifier, "Verifier")),
		registry: registryv1.NewRegistryServiceClient(orMissing(c.Registry, "Registry")),
		know:     knowledgev1.NewKnowledgeServiceClient(orMissing(c.Knowledge, "Knowledge")),
		opts:     opts,
		log:      opts.Logger,
		pages:    map[string]*template.Template{},
		mux:      http.NewServeMux(),
	}
	if d.log == nil {
		d.log = slog.Default()
	}
	if err := d.parseTemplates(); err != nil {
		return nil, err
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	m := d.mux
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /{$}", d.runsPage)
	m.HandleFunc("GET /runs/{id}", d.runPage)
	m.HandleFunc("GET /runs/{id}/live", d.runLive)
	m.HandleFunc("GET /runs/{id}/events", d.runEvents)
	m.HandleFunc("GET /runs/{id}/tasks/{task}", d.taskPage)
	m.HandleFunc("GET /runs/{id}/verify", d.verifyPage)
	m.HandleFunc("GET /builds", d.buildsPage)
	m.HandleFunc("GET /builds/{id}", d.buildPage)
	m.HandleFunc("POST /builds/{id}/{action}", d.buildAction)
	m.HandleFunc("GET /agents", d.agentsPage)
	m.HandleFunc("GET /knowledge", d.knowledgePage)
	m.HandleFunc("GET /login", d.loginPage)
	m.HandleFunc("POST /login", d.login)
	m.HandleFunc("POST /logout", d.logout)
	m.HandleFunc("POST /runs/{id}/{action}", d.runAction)
	m.HandleFunc("POST /runs/{id}/tasks/{task}/{action}", d.taskAction)
	m.HandleFunc("POST /runs/{id}/verify/{criterion}", d.signOff)
	m.HandleFunc("POST /runs/{id}/gates/{gate}", d.gateSignOff)
	return d, nil
}

// ServeHTTP serves the dashboard with headers that keep the page to its own origin.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// Everything the page loads comes from here: no CDN, no other host, no inline script.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	// same-origin, not no-referrer: with no-referrer a browser sends "Origin: null" on form posts,
	// and sameOrigin could not tell the dashboard's own forms from another site's.
	h.Set("Referrer-Policy", "same-origin")
	if r.Method == http.MethodPost && !sameOrigin(r) {
		http.Error(w, "cross-origin form refused", http.StatusForbidden)
		return
	}
	d.mux.ServeHTTP(w, r)
}

// sameOrigin refuses cross-site form posts: a browser says where a POST comes from
// (Sec-Fetch-Site, Origin or at least Referer); one from another site is refused.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return true
	case "":
	default:
		return false
	}
	src := r.Header.Get("Origin")
	if src == "" {
		src = r.Header.Get("Referer")
	}
	if src == "" {
		return true // not a browser (curl, tests): the token is what protects the call
	}
	u, err := url.Parse(src)
	return err == nil && u.Host == r.Host
}

// operatorToken is the signed-in operator's token: the Authorization header's, else the cookie's.
func operatorToken(r *http.Request) string {
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return strings.TrimSpace(v)
	}
	if c, err := r.Cookie(tokenCookie); err == nil {
		if v, err := url.QueryUnescape(c.Value); err == nil {
			return v
		}
	}
	return ""
}

// readCtx is the context of a read call: the operator's token, else the read-only token.
func (d *Dashboard) readCtx(r *http.Request) context.Context {
	tok := operatorToken(r)
	if tok == "" {
		tok = d.opts.ReadToken
	}
	return withToken(r.Context(), tok)
}

// actCtx is the context of an action: the operator's token only.
func (d *Dashboard) actCtx(r *http.Request) context.Context {
	return withToken(r.Context(), operatorToken(r))
}

func withToken(ctx context.Context, tok string) context.Context {
	if tok == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

// canAct reports whether the page should offer actions: the operator signed in, or no read-only
// token is configured (then either the API needs no token, or the viewer could not read at all).
func (d *Dashboard) canAct(r *http.Request) bool {
	return operatorToken(r) != "" || d.opts.ReadToken == ""
}

// fail answers a failed call: the login page for Unauthenticated, the API's own words otherwise,
// with the HTTP status that matches its code.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, err error) {
	st, _ := status.FromError(err)
	code := httpStatus(st.Code())
	if st.Code() == codes.Unauthenticated || st.Code() == codes.PermissionDenied {
		w.WriteHeader(code)
		d.render(w, r, "login", map[string]any{"Error": st.Message(), "Next": r.URL.Path})
		return
	}
	if code == http.StatusInternalServerError {
		d.log.Warn("dashboard: call failed", slog.String("path", r.URL.Path), slog.Any("error", err))
	}
	w.WriteHeader(code)
	d.render(w, r, "error", map[string]any{"Code": st.Code().String(), "Message": st.Message()})
}

func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.InvalidArgument, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.NotFound:
		return http.StatusNotFound
	case codes.FailedPrecondition, codes.Aborted, codes.AlreadyExists:
		return http.StatusConflict
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded, codes.Canceled:
		return http.StatusGatewayTimeout
	default:
		return http.StatusInternalServerError
	}
}

func (d *Dashboard) loginPage(w http.ResponseWriter, r *http.Request) {
	d.render(w, r, "login", map[string]any{"Next": r.URL.Query().Get("next")})
}

func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	tok := strings.TrimSpace(r.PostFormValue("token"))
	if tok == "" {
		w.WriteHeader(http.StatusBadRequest)
		d.render(w, r, "login", map[string]any{"Error": "give a token"})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: url.QueryEscape(tok), Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// safeNext keeps redirects on this site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.Contains(next, `\`) {
		return "/"
	}
	return next
}

// render executes a page; a template error after the header went out is only logged.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, page string, data map[string]any) {
	t, ok := d.pages[page]
	if !ok {
		http.Error(w, "no page "+page, http.StatusInternalServerError)
		return
	}
	if data == nil {
		data = map[string]any{}
	}
	data["SignedIn"] = operatorToken(r) != ""
	data["CanAct"] = d.canAct(r)
	data["Path"] = r.URL.Path
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
	}
	if err := t.ExecuteTemplate(w, "layout", data); err != nil && !errors.Is(err, context.Canceled) {
		d.log.Warn("dashboard: render", slog.String("page", page), slog.Any("error", err))
	}
}
