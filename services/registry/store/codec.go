package store

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/converge-dev/converge/platform/repopath"
)

// This file holds what the SQL backends share: the JSON forms of the agent columns and the
// choice of the most specific ownership pattern.

// configJSON is the stored form of AgentConfig: the seed's
// {maxRetries, heartbeatIntervalMs, taskTimeoutMs, validationTimeoutMs}.
type configJSON struct {
	MaxRetries          int32 `json:"maxRetries"`
	HeartbeatIntervalMs int64 `json:"heartbeatIntervalMs"`
	TaskTimeoutMs       int64 `json:"taskTimeoutMs"`
	ValidationTimeoutMs int64 `json:"validationTimeoutMs"`
}

// MarshalConfig answers the stored JSON of c (a config column).
func MarshalConfig(c AgentConfig) []byte {
	b, err := json.Marshal(configJSON{
		MaxRetries:          c.MaxRetries,
		HeartbeatIntervalMs: c.HeartbeatInterval.Milliseconds(),
		TaskTimeoutMs:       c.TaskTimeout.Milliseconds(),
		ValidationTimeoutMs: c.ValidationTimeout.Milliseconds(),
	})
	if err != nil {
		panic(fmt.Sprintf("store: marshal agent config: %v", err)) // plain numbers: cannot fail
	}
	return b
}

// UnmarshalConfig reads a config column; absent fields take the defaults.
func UnmarshalConfig(b []byte) (AgentConfig, error) {
	c := configJSON{MaxRetries: -1}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &c); err != nil {
			return AgentConfig{}, fmt.Errorf("store: agent config %s: %w", b, err)
		}
	}
	out := AgentConfig{
		MaxRetries:        c.MaxRetries,
		HeartbeatInterval: time.Duration(c.HeartbeatIntervalMs) * time.Millisecond,
		TaskTimeout:       time.Duration(c.TaskTimeoutMs) * time.Millisecond,
		ValidationTimeout: time.Duration(c.ValidationTimeoutMs) * time.Millisecond,
	}
	if out.MaxRetries < 0 {
		out.MaxRetries = DefaultMaxRetries
	}
	return out.WithDefaults(), nil
}

// MarshalErrorContext answers the stored JSON of e (an error_context column), nil for nil.
func MarshalErrorContext(e *ErrorContext) []byte {
	if e == nil {
		return nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		panic(fmt.Sprintf("store: marshal error context: %v", err)) // strings and a time: cannot fail
	}
	return b
}

// UnmarshalErrorContext reads an error_context column; nil (SQL NULL) is nil.
func UnmarshalErrorContext(b []byte) (*ErrorContext, error) {
	if b == nil {
		return nil, nil
	}
	var e ErrorContext
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("store: agent error context %s: %w", b, err)
	}
	return &e, nil
}

// MostSpecific answers the candidate whose pattern matches the normalised path p most
// specifically (repopath.MoreSpecific), and false when none matches. Backends fetch the candidates
// by base (paths.Base among repopath.Ancestors(p)) and choose with it.
func MostSpecific(candidates []Ownership, p string) (Ownership, bool) {
	var (
		best  Ownership
		found bool
	)
	for _, c := range candidates {
		if !repopath.Match(c.Pattern, p) {
			continue
		}
		if !found || repopath.MoreSpecific(c.Pattern, best.Pattern) {
			best, found = c, true
		}
	}
	return best, found
}
