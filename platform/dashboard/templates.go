package dashboard

import (
	"fmt"
	"html/template"
	"strings"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// pageNames are the templates/<name>.html pages; each is parsed with layout.html and live.html (the
// live part of the run view, also served alone).
var pageNames = []string{"runs", "run", "live", "task", "verify", "builds", "build", "agents", "knowledge", "login", "error"}

func (d *Dashboard) parseTemplates() error {
	funcs := template.FuncMap{
		"enum":       enumName,
		"short":      short,
		"when":       when,
		"dur":        dur,
		"runtime":    runtime,
		"pct":        pct,
		"lower":      strings.ToLower,
		"ago":        ago,
		"contains":   strings.Contains,
		"diffLines":  diffLines,
		"fileStatus": fileStatus,
		"kib":        kib,
	}
	for _, p := range pageNames {
		files := []string{"templates/layout.html", "templates/live.html"}
		if p != "live" {
			files = append(files, "templates/"+p+".html")
		}
		t, err := template.New(p).Funcs(funcs).ParseFS(templateFS, files...)
		if err != nil {
			return fmt.Errorf("dashboard: template %s: %w", p, err)
		}
		d.pages[p] = t
	}
	return nil
}

// enumName is an enum value without its type prefix: EXECUTION_STATUS_RUNNING → RUNNING.
func enumName(e protoreflect.Enum) string {
	v := e.Descriptor().Values().ByNumber(e.Number())
	if v == nil {
		return fmt.Sprint(e.Number())
	}
	name := string(v.Name())
	// The prefix is the enum's name in upper snake case.
	prefix := upperSnake(string(e.Descriptor().Name())) + "_"
	name = strings.TrimPrefix(name, prefix)
	if name == "UNSPECIFIED" {
		return ""
	}
	return name
}

func upperSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// short is a commit or id cut to n characters.
func short(n int, s string) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func when(t *timestamppb.Timestamp) string {
	if t == nil || !t.IsValid() || t.AsTime().IsZero() {
		return ""
	}
	return t.AsTime().UTC().Format("2006-01-02 15:04:05Z")
}

func dur(d *durationpb.Duration) string {
	if d == nil {
		return ""
	}
	return d.AsDuration().Round(time.Millisecond).String()
}

// runtime is how long something ran: start to end, or to now while it runs.
func runtime(start, end *timestamppb.Timestamp) string {
	if start == nil || !start.IsValid() || start.AsTime().IsZero() {
		return ""
	}
	stop := time.Now()
	if end != nil && end.IsValid() && !end.AsTime().IsZero() {
		stop = end.AsTime()
	}
	return stop.Sub(start.AsTime()).Round(time.Second).String()
}

func ago(t *timestamppb.Timestamp) string {
	if t == nil || !t.IsValid() || t.AsTime().IsZero() {
		return ""
	}
	return time.Since(t.AsTime()).Round(time.Second).String() + " ago"
}

// pct is done/total as a whole percentage (0 when total is 0).
func pct(done, total int32) int32 {
	if total <= 0 {
		return 0
	}
	return done * 100 / total
}
