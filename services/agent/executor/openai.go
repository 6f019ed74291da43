package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"time"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
)

// SystemPrompt is the system message of the openai executor's requests.
const SystemPrompt = "You write the complete content of one file of a software project. " +
	"Answer with the file's full content in a single fenced code block, " +
	"with no explanations before or after it."

const (
	// maxResponseBytes bounds an endpoint's answer.
	maxResponseBytes = 16 << 20
	// errorExcerptBytes is how much of an error answer goes into an Error.
	errorExcerptBytes = 1024
)

// openAIExecutor asks an OpenAI-compatible chat-completions endpoint for the task file's
// content and writes it.
type openAIExecutor struct {
	spec *commonv1.OpenAIExecutor
	opts *options
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRequest struct {
	Model       string        `json:"model"`
	Messages    []chatMessage `json:"messages"`
	Temperature float64       `json:"temperature"`
	MaxTokens   int32         `json:"max_tokens,omitempty"`
}

type chatResponse struct {
	Choices []struct {
		Message struct {
			Content *string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
}

func (e *openAIExecutor) Run(ctx context.Context, req Request) (Result, error) {
	start := time.Now()
	result := Result{ExitCode: -1}
	finish := func(err *Error) (Result, error) {
		result.Duration = time.Since(start)
		if err != nil {
			return result, err
		}
		return result, nil
	}

	if err := req.check(); err != nil {
		return finish(err)
	}
	file := req.Task.GetFile()
	if file == "" {
		return finish(newError(CodeNoFile, "task %q has no file for the openai executor to write", req.Task.GetId()))
	}
	target, err := safePath(req.Dir, file)
	if err != nil {
		return finish(err.(*Error))
	}
	rel := file // valid: safePath checked it with repopath

	if req.Task.GetAction() == commonv1.TaskAction_TASK_ACTION_DELETE {
		// Nothing to ask: the task's file goes.
		if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return finish(newError(CodeExecutorFailed, "delete %s: %v", rel, err))
		}
		result.ExitCode, result.FilesWritten = 0, []string{rel}
		return finish(nil)
	}

	key := ""
	if name := e.spec.GetApiKeyEnv(); name != "" {
		v, ok := e.opts.lookupEnv(name)
		if !ok || v == "" {
			return finish(newError(CodeExecutorFailed, "the API key variable %s is not set in the agent's environment", name))
		}
		key = v
	}

	timeout := req.timeout()
	if d := e.spec.GetRequestTimeout(); d != nil && d.AsDuration() > 0 {
		timeout = d.AsDuration()
	}
	content, answer, cerr := e.complete(ctx, req, key, timeout, &result.Usage)
	result.Output = clean(answer, req.outputCap())
	if cerr != nil {
		if cerr.Output == "" {
			cerr.Output = result.Output
		}
		return finish(cerr)
	}

	code := extractFile(file, content)
	if code == "" {
		cerr := newError(CodeBadResponse, "the answer holds no file content")
		cerr.Output = result.Output
		return finish(cerr)
	}
	if err := writeFile(target, []byte(code), 0o644); err != nil {
		return finish(newError(CodeExecutorFailed, "write %s: %v", rel, err))
	}
	result.ExitCode, result.FilesWritten = 0, []string{rel}
	return finish(nil)
}

// complete sends the chat-completions request and answers the first choice's content and the
// raw answer (for Output), and sets *usage from the answer's usage (the API reports no cost).
func (e *openAIExecutor) complete(ctx context.Context, req Request, key string, timeout time.Duration, usage *Usage) (content, answer string, _ *Error) {
	body, err := json.Marshal(chatRequest{
		Model: e.spec.GetModel(),
		Messages: []chatMessage{
			{Role: "system", Content: SystemPrompt},
			{Role: "user", Content: req.Prompt},
		},
		Temperature: e.spec.GetTemperature(),
		MaxTokens:   e.spec.GetMaxTokens(),
	})
	if err != nil {
		return "", "", newError(CodeExecutorFailed, "encode the request: %v", err)
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	endpoint := strings.TrimRight(e.spec.GetBaseUrl(), "/") + "/chat/completions"
	hreq, err := http.NewRequestWithContext(rctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return "", "", newError(CodeExecutorFailed, "build the request: %v", redact(err.Error(), key))
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	if key != "" {
		hreq.Header.Set("Authorization", "Bearer "+key)
	}

	// failed classifies a transport or read error: the caller's context, the timeout, or the
	// endpoint.
	failed := func(what string, err error) *Error {
		switch {
		case ctx.Err() != nil:
			return &Error{Code: CodeCanceled, Message: what + ": " + ctx.Err().Error(), Err: ctx.Err()}
		case errors.Is(rctx.Err(), context.DeadlineExceeded):
			return &Error{Code: CodeTimeout, Message: fmt.Sprintf("%s: no answer within the %s request timeout", what, timeout),
				Err: context.DeadlineExceeded}
		}
		return newError(CodeExecutorFailed, "%s: %s", what, redact(err.Error(), key))
	}

	resp, err := e.opts.httpClient.Do(hreq)
	if err != nil {
		return "", "", failed("POST "+redactURL(endpoint), err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return "", "", failed("read the answer", err)
	}
	answer = redact(string(raw), key)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		excerpt := excerptHead(strings.TrimSpace(answer), errorExcerptBytes)
		return "", answer, &Error{Code: CodeExecutorFailed,
			Message: fmt.Sprintf("the endpoint answered %s: %s", resp.Status, excerpt), Output: excerpt}
	}
	if len(raw) > maxResponseBytes {
		return "", "", newError(CodeBadResponse, "the answer is larger than %d bytes", maxResponseBytes)
	}
	var cr chatResponse
	if err := json.Unmarshal(raw, &cr); err != nil {
		return "", answer, newError(CodeBadResponse, "the answer is not a chat completion: %v", err)
	}
	usage.InputTokens, usage.OutputTokens = max(cr.Usage.PromptTokens, 0), max(cr.Usage.CompletionTokens, 0)
	if len(cr.Choices) == 0 || cr.Choices[0].Message.Content == nil {
		return "", answer, newError(CodeBadResponse, "the answer has no choices[0].message.content")
	}
	content = *cr.Choices[0].Message.Content
	if cr.Choices[0].FinishReason == "length" {
		return content, content, newError(CodeBadResponse, "the answer was cut off at max_tokens (finish_reason \"length\")")
	}
	return content, content, nil
}

// redact removes secret from s.
func redact(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "[redacted]")
}

// redactURL drops a URL's user information.
func redactURL(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		rest := u[i+3:]
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
			return u[:i+3] + rest[at+1:]
		}
	}
	return u
}
