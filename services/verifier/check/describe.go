package check

import (
	"fmt"
	"strings"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// Describe says in one line what c's check would do against t, for dry runs: "would run
// `go test ./...`", "would send GET http://127.0.0.1:3000/api/export".
func Describe(t *Target, c *verifierv1.Criterion) string {
	switch {
	case c.GetCommand() != nil:
		cc := c.GetCommand()
		where := "the target directory"
		if t.Dir == "" {
			where = "an empty scratch directory"
		}
		if wd := cc.GetWorkingDir(); wd != "" {
			where += ", in " + wd
		}
		return fmt.Sprintf("would run `%s` in %s (timeout %s)", displayCommand(cc), where, timeoutOr(cc.GetTimeout().AsDuration().String(), cc.GetTimeout() != nil))
	case c.GetHttp() != nil:
		h := c.GetHttp()
		url := h.GetUrl()
		if url == "" {
			url = strings.TrimSuffix(t.BaseURL, "/") + h.GetPath()
		}
		method := h.GetMethod()
		if method == "" {
			method = "GET"
		}
		return fmt.Sprintf("would send %s %s", method, url)
	case c.GetFile() != nil:
		f := c.GetFile()
		if f.GetPath() != "" {
			return "would inspect " + f.GetPath()
		}
		return "would inspect the files matching " + f.GetGlob()
	case c.GetGrpc() != nil:
		g := c.GetGrpc()
		addr := g.GetAddress()
		if addr == "" {
			addr = t.GRPCAddress
		}
		method := healthMethod
		if u := g.GetUnary(); u != nil {
			method = strings.TrimPrefix(u.GetMethod(), "/")
		}
		return fmt.Sprintf("would call %s at %s", method, addr)
	default:
		return "would wait for a person's verdict"
	}
}

func timeoutOr(s string, set bool) string {
	if set {
		return s
	}
	return "default"
}
