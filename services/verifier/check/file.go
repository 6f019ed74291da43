package check

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

const (
	// maxGlobMatches is how many files a glob inspects.
	maxGlobMatches = 10000
	// maxFacts is how many files a file check's evidence describes.
	maxFacts = 100
)

// errEnough stops a glob walk at maxGlobMatches.
var errEnough = errors.New("enough matches")

// fileFact is what was observed about one file, with its content kept for assertions.
type fileFact struct {
	fact    *verifierv1.FileFact
	content string // the first OutputCap bytes
	err     error  // reading failed
}

// runFile runs a file check on the target directory.
func runFile(ctx context.Context, t *Target, o *Options, fc *verifierv1.FileCheck) outcome {
	if out, ok := rootAvailable(t); !ok {
		return out
	}
	if t.Dir == "" {
		// Verify refuses file checks without a directory target; this is a safety net.
		return blocked(verifierv1.BlockReason_BLOCK_REASON_TARGET_UNAVAILABLE, 0, "a file check needs a directory target")
	}
	o.attempt(1)
	e := fc.GetExpect()
	if e == nil {
		e = &verifierv1.FileExpectation{}
	}
	absent := e.GetPresence() == verifierv1.FilePresence_FILE_PRESENCE_ABSENT
	ev := &verifierv1.FileEvidence{}
	evidence := &verifierv1.Evidence{Kind: &verifierv1.Evidence_File{File: ev}}
	var a assertions
	res := outcome{evidence: evidence, attempts: 1}

	// A file check has no timeout of its own: the request's default bounds it.
	ctx, cancel := context.WithTimeout(ctx, o.DefaultTimeout)
	defer cancel()

	// Per-file assertions are the same list for every file; they are evaluated as each file is
	// read (its content is not kept) and aggregated over the files.
	type agg struct {
		expectation string
		passed      bool
		actual      string
		failures    int
	}
	var (
		aggs    []*agg
		files   []*verifierv1.FileFact
		failing = map[string]bool{}
	)
	evalFile := func(f *fileFact) {
		if f.err != nil {
			a.add(fmt.Sprintf("%s can be read", f.fact.Path), false, f.err.Error())
			failing[f.fact.Path] = true
		}
		var fa assertions
		badLine := checkText(&fa, textSource{label: "content", text: f.content, numbered: true}, e.GetContent())
		if e.MinLines != nil {
			fa.add(fmt.Sprintf("at least %d lines", e.GetMinLines()), f.fact.LineCount >= e.GetMinLines(), plural(int(f.fact.LineCount), "line"))
		}
		if e.MaxLines != nil {
			fa.add(fmt.Sprintf("at most %d lines", e.GetMaxLines()), f.fact.LineCount <= e.GetMaxLines(), plural(int(f.fact.LineCount), "line"))
		}
		for i, r := range fa.list {
			if i >= len(aggs) {
				aggs = append(aggs, &agg{expectation: r.Expectation, passed: true, actual: r.Actual})
			}
			g := aggs[i]
			if r.Passed {
				continue
			}
			if g.passed {
				g.actual = fmt.Sprintf("%s: %s", f.fact.Path, r.Actual)
				if res.file == "" {
					res.file, res.line = f.fact.Path, badLine
				}
			}
			g.passed = false
			g.failures++
			failing[f.fact.Path] = true
			if ev.ContentExcerpt == "" && f.content != "" {
				ev.ContentExcerpt = head(f.content, o.ExcerptBytes)
			}
		}
	}
	keepContent := !absent && len(e.GetContent().GetContains())+len(e.GetContent().GetNotContains())+len(e.GetContent().GetMatches()) > 0

	if p := fc.GetPath(); p != "" {
		rel := path.Clean(p)
		ev.Pattern = rel
		f := inspect(ctx, t.Dir, rel, o.OutputCap, keepContent)
		files = append(files, f.fact)
		if f.fact.Exists {
			ev.MatchCount = 1
		}
		if absent {
			a.add(fmt.Sprintf("%s is absent", rel), !f.fact.Exists, existence(f.fact.Exists))
			if f.fact.Exists {
				res.file = rel
			}
		} else {
			a.add(fmt.Sprintf("%s exists", rel), f.fact.Exists, existence(f.fact.Exists))
			if !f.fact.Exists {
				res.file = rel
			} else {
				evalFile(f)
			}
		}
	} else {
		pattern := path.Clean(fc.GetGlob())
		ev.Pattern = pattern
		matches, err := glob(ctx, t.Dir, pattern)
		if err != nil {
			if out, ok := rootAvailable(t); !ok {
				return out
			}
			a.add(fmt.Sprintf("files matching %s can be listed", pattern), false, err.Error())
		}
		for _, m := range matches {
			f := inspect(ctx, t.Dir, m, o.OutputCap, keepContent)
			if !f.fact.Exists {
				continue // gone since the walk
			}
			files = append(files, f.fact)
			if absent {
				if res.file == "" {
					res.file = f.fact.Path
				}
			} else {
				evalFile(f)
			}
		}
		ev.MatchCount = int32(len(files))
		names := make([]string, 0, 3)
		for i := 0; i < len(files) && i < 3; i++ {
			names = append(names, files[i].Path)
		}
		actual := plural(len(files), "file")
		if len(names) > 0 {
			actual += ": " + strings.Join(names, ", ")
			if len(files) > len(names) {
				actual += ", …"
			}
		}
		switch {
		case absent:
			a.add(fmt.Sprintf("no file matches %s", pattern), len(files) == 0, actual)
		case e.MinMatches == nil && e.MaxMatches == nil:
			a.add(fmt.Sprintf("at least 1 file matches %s", pattern), len(files) >= 1, actual)
		default:
			if e.MinMatches != nil {
				a.add(fmt.Sprintf("at least %d files match %s", e.GetMinMatches(), pattern), len(files) >= int(e.GetMinMatches()), actual)
			}
			if e.MaxMatches != nil {
				a.add(fmt.Sprintf("at most %d files match %s", e.GetMaxMatches(), pattern), len(files) <= int(e.GetMaxMatches()), actual)
			}
		}
	}
	for _, g := range aggs {
		expectation := g.expectation
		if fc.GetGlob() != "" {
			expectation = "every file: " + expectation
		}
		actual := g.actual
		if g.passed && len(files) > 1 {
			actual = fmt.Sprintf("holds in all %d files", len(files))
		} else if g.failures > 1 {
			actual += fmt.Sprintf(" (and %d more)", g.failures-1)
		}
		a.add(expectation, g.passed, actual)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		a.add(fmt.Sprintf("inspection done within %s", o.DefaultTimeout), false, "ran out of time")
	}

	// Facts, failing files first.
	sort.SliceStable(files, func(i, j int) bool { return failing[files[i].Path] && !failing[files[j].Path] })
	for i := 0; i < len(files) && len(ev.Files) < maxFacts; i++ {
		ev.Files = append(ev.Files, files[i])
	}
	if out, ok := rootAvailable(t); !ok {
		return out // the directory vanished while we looked
	}
	evidence.Assertions = a.list
	evidence.Summary = fileSummary(ev, absent, fc.GetPath() != "")
	res.status = judge(&a)
	if res.status == verifierv1.CriterionStatus_CRITERION_STATUS_PASS {
		res.file, res.line = "", 0
	}
	return res
}

func existence(exists bool) string {
	if exists {
		return "exists"
	}
	return "absent"
}

func fileSummary(ev *verifierv1.FileEvidence, absent, single bool) string {
	if single {
		if ev.MatchCount == 0 {
			return fmt.Sprintf("%s: absent", ev.Pattern)
		}
		f := ev.Files[0]
		return fmt.Sprintf("%s: %s, %s", ev.Pattern, plural(int(f.SizeBytes), "byte"), plural(int(f.LineCount), "line"))
	}
	return fmt.Sprintf("%s: %s match", ev.Pattern, plural(int(ev.MatchCount), "file"))
}

// glob lists the regular files under root matching pattern, at most maxGlobMatches, sorted.
// Symlinked directories are not followed and matches that resolve outside root are dropped.
func glob(ctx context.Context, root, pattern string) ([]string, error) {
	var matches []string
	err := doublestar.GlobWalk(os.DirFS(root), pattern, func(p string, d fs.DirEntry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		resolved, err := filepath.EvalSymlinks(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil || !within(root, resolved) {
			return nil
		}
		if fi, err := os.Stat(resolved); err != nil || !fi.Mode().IsRegular() {
			return nil
		}
		matches = append(matches, p)
		if len(matches) >= maxGlobMatches {
			return errEnough
		}
		return nil
	}, doublestar.WithFilesOnly(), doublestar.WithNoFollow())
	if errors.Is(err, errEnough) {
		err = nil
	}
	sort.Strings(matches)
	return matches, err
}

// inspect looks at the target-relative file rel under root: it exists when it is a regular file
// inside root (symlinks resolved). Its first capBytes are kept when keep is set.
func inspect(ctx context.Context, root, rel string, capBytes int64, keep bool) *fileFact {
	f := &fileFact{fact: &verifierv1.FileFact{Path: rel}}
	resolved, err := filepath.EvalSymlinks(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil || !within(root, resolved) {
		return f
	}
	fh, err := os.Open(resolved)
	if err != nil {
		return f
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return f
	}
	f.fact.Exists = true
	f.fact.SizeBytes = fi.Size()

	// One pass: hash everything, count every line, keep the first capBytes.
	h := sha256.New()
	var kept bytes.Buffer
	var lines int64
	var last byte
	buf := make([]byte, 64<<10)
	if !keep {
		capBytes = 0
	}
	for ctx.Err() == nil {
		n, rerr := fh.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			h.Write(chunk)
			lines += int64(bytes.Count(chunk, []byte{'\n'}))
			last = chunk[n-1]
			if room := capBytes - int64(kept.Len()); room > 0 {
				kept.Write(chunk[:min(int64(n), room)])
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			f.err = rerr
			break
		}
	}
	if f.fact.SizeBytes > 0 && last != '\n' {
		lines++ // a last line without "\n" counts
	}
	f.fact.LineCount = lines
	f.fact.Sha256 = hex.EncodeToString(h.Sum(nil))
	f.content = kept.String()
	return f
}
