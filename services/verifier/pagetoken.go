package verifier

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	"github.com/converge-dev/converge/services/verifier/store"
)

// Page tokens are opaque to clients: base64url JSON holding where the previous page ended and a
// fingerprint of the filters it was issued for, so a token reused with other filters is refused
// instead of answering a page of something else.

// pageToken is the content of a page token.
type pageToken struct {
	// Filter is the fingerprint of the request's filters.
	Filter string `json:"f"`
	// Time and ID are the last report of the previous page (ListReports).
	Time string `json:"t,omitempty"`
	ID   string `json:"id"`
}

// fingerprint identifies a list's filters.
func fingerprint(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:8])
}

func encodeToken(t pageToken) string {
	b, _ := json.Marshal(t) // a struct of strings always marshals
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeToken(s, filter string) (pageToken, error) {
	var t pageToken
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(b, &t) != nil || t.ID == "" {
		return t, &pageTokenError{reason: "malformed: pass the next_page_token of the previous page as it is"}
	}
	if t.Filter != filter {
		return t, &pageTokenError{reason: "was issued for different filters: keep the filters of the first page"}
	}
	return t, nil
}

func encodeReportToken(filter string, created time.Time, id string) string {
	return encodeToken(pageToken{Filter: filter, Time: created.UTC().Format(time.RFC3339Nano), ID: id})
}

func decodeReportToken(s, filter string) (*store.Cursor, error) {
	t, err := decodeToken(s, filter)
	if err != nil {
		return nil, err
	}
	created, perr := time.Parse(time.RFC3339Nano, t.Time)
	if perr != nil {
		return nil, &pageTokenError{reason: "malformed: pass the next_page_token of the previous page as it is"}
	}
	return &store.Cursor{CreateTime: created, ID: t.ID}, nil
}

func encodeHumanToken(filter, id string) string {
	return encodeToken(pageToken{Filter: filter, ID: id})
}

func decodeHumanToken(s, filter string) (string, error) {
	t, err := decodeToken(s, filter)
	return t.ID, err
}
