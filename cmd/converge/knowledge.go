package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	"github.com/converge-dev/converge/platform/knowledgeproject"
)

// knowledgeCommand is `converge knowledge`: what Knowledge holds about a repository's files, the
// items Prime gives the agents, with the failure signature a feature build's fix was recorded
// under.
func knowledgeCommand() *cobra.Command {
	var (
		c                         clientFlags
		file, repo, project, text string
		signature, criterion      string
		tags                      []string
		limit                     int
		minConfidence             float64
	)
	cmd := &cobra.Command{
		Use:   "knowledge",
		Short: "Show what Knowledge holds about a repository's files (gotchas, patterns, what fixed a failed criterion)",
		Long: "Show the Knowledge items of a repository: those an agent's Prime receives for --file (every stored pattern " +
			"matching it), or all of them. An item a feature build recorded when a fix task made a failing done-criterion " +
			"pass names the criterion and the failure signature it fixed (filter with --signature or --criterion).\n\n" +
			"  converge knowledge --repo . --file export.sh\n  converge knowledge --repo . --signature 3f2a9c0d41be",
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 500 {
				return usagef("--limit %d: want 1 to 500", limit)
			}
			if minConfidence < 0 || minConfidence > 1 {
				return usagef("--min-confidence %g: want 0 to 1", minConfidence)
			}
			switch {
			case project != "":
			case strings.Contains(repo, "://") || (strings.Contains(repo, "@") && strings.Contains(repo, ":")): // a clone URL
				project = knowledgeproject.Of(repo, "", "")
			default:
				dir, err := checkGitRepo(repo)
				if err != nil {
					return err
				}
				project = knowledgeproject.Of("", dir, "")
			}
			req := &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_All{All: true}, Project: project,
				Tags: tags, Text: text, Limit: int32(limit), MinConfidence: minConfidence}
			if file != "" {
				req.Target = &knowledgev1.QueryItemsRequest_FilePath{FilePath: file}
			}
			if signature != "" {
				req.Tags = append(req.Tags, "signature-"+shortSignature(strings.ToLower(signature)))
			}
			if criterion != "" {
				req.Tags = append(req.Tags, "criterion-"+strings.ToLower(criterion))
			}
			conn, err := c.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer conn.Close()
			res, err := knowledgev1.NewKnowledgeServiceClient(conn).QueryItems(cmd.Context(), req)
			if err != nil {
				return rpcError("query knowledge", err)
			}
			renderKnowledge(cmd.OutOrStdout(), project, res.GetMatches())
			return nil
		},
	}
	c.bind(cmd, defaultServer, "converge server (Knowledge) to ask")
	fs := cmd.Flags()
	fs.StringVar(&repo, "repo", ".", "the repository whose items to show: a local directory, or the clone URL the build used")
	fs.StringVar(&project, "project", "", "the Knowledge project instead of --repo, as stored (e.g. github.com/acme/shop)")
	fs.StringVar(&file, "file", "", "repository-relative file: the items Prime gives a task on it (default: every item)")
	fs.StringSliceVar(&tags, "tag", nil, "only items with this tag (repeatable)")
	fs.StringVar(&signature, "signature", "", "only what fixed failures with this failure signature (its first 12 characters suffice)")
	fs.StringVar(&criterion, "criterion", "", "only what fixed this done-criterion, e.g. F2")
	fs.StringVar(&text, "text", "", "only items whose content has all these words")
	fs.IntVar(&limit, "limit", 20, "most items shown")
	fs.Float64Var(&minConfidence, "min-confidence", 0, "only items at least this confident (agents ask for 0.6)")
	return cmd
}

// shortSignature is the part of a failure signature a feature build tags its items with.
func shortSignature(sig string) string {
	if len(sig) > 12 {
		return sig[:12]
	}
	return sig
}

// renderKnowledge prints the items, each with what a feature build linked it to.
func renderKnowledge(w io.Writer, project string, matches []*knowledgev1.ItemMatch) {
	if len(matches) == 0 {
		fmt.Fprintf(w, "No knowledge items for %s.\n", project)
		return
	}
	for i, m := range matches {
		it := m.GetItem()
		if i > 0 {
			fmt.Fprintln(w)
		}
		typ := strings.TrimPrefix(it.GetType().String(), "ITEM_TYPE_")
		fmt.Fprintf(w, "%s %s on %s (confidence %.2f", it.GetId(), typ, it.GetFilePattern(), it.GetEffectiveConfidence())
		if it.GetProvisional() {
			fmt.Fprint(w, ", provisional: not given to agents until another principal confirms it")
		}
		fmt.Fprintln(w, ")")
		var sig, crit string
		for _, tag := range it.GetTags() {
			if s, ok := strings.CutPrefix(tag, "signature-"); ok {
				sig = s
			}
			if s, ok := strings.CutPrefix(tag, "criterion-"); ok {
				crit = strings.ToUpper(s)
			}
		}
		if sig != "" {
			fmt.Fprintf(w, "  Failure signature: %s", sig)
			if crit != "" {
				fmt.Fprintf(w, " (criterion %s)", crit)
			}
			fmt.Fprintln(w)
		}
		if src := it.GetSource(); src.GetExecutionId() != "" || src.GetTaskId() != "" {
			fmt.Fprintf(w, "  Source: execution %s, task %s\n", src.GetExecutionId(), src.GetTaskId())
		}
		if len(it.GetTags()) > 0 {
			fmt.Fprintf(w, "  Tags: %s\n", strings.Join(it.GetTags(), ", "))
		}
		for _, line := range strings.Split(strings.TrimSpace(it.GetContent()), "\n") {
			fmt.Fprintf(w, "  | %s\n", line)
		}
	}
}
