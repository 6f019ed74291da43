package grpcerr_test

import (
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// issueNumber matches a tracker reference in a message: "issue 12", "issue #5", "(#5)".
var issueNumber = regexp.MustCompile(`(?i)\bissues?\s*#?\d+|#\d+\b`)

// TestNoIssueNumbersInMessages: no string in the services' and the platform's code (what can
// reach a client as a status message) names an issue of the tracker; comments may.
func TestNoIssueNumbersInMessages(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	checked := 0
	for _, dir := range []string{"services", "platform", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			checked++
			fset := token.NewFileSet()
			var s scanner.Scanner
			s.Init(fset.AddFile(path, -1, len(src)), src, nil, 0)
			for {
				pos, tok, lit := s.Scan()
				if tok == token.EOF {
					break
				}
				if tok == token.STRING && issueNumber.MatchString(lit) {
					t.Errorf("%s: string %s names an issue number", fset.Position(pos), lit)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d files: is the repository layout what this test expects?", checked)
	}
}
