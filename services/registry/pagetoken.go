package registry

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"time"
)

// Page tokens are opaque to clients: base64url JSON of where the next page starts and of the
// query that issued them, so that a token used with another query (other filters) is refused
// rather than silently answering a wrong page.

// pageToken is the content of every page token; each list fills its own fields.
type pageToken struct {
	// List names the RPC that issued the token.
	List string `json:"l"`
	// After is the last resource, pattern or instance id of the previous page.
	After string `json:"a,omitempty"`
	// AfterTime is the spawn time of the last agent of the previous page (ListAgents).
	AfterTime time.Time `json:"t,omitzero"`
	// The query's filters.
	Prefix    string   `json:"p,omitempty"`
	Holder    string   `json:"h,omitempty"`
	Owner     string   `json:"o,omitempty"`
	Execution string   `json:"e,omitempty"`
	Statuses  []string `json:"s,omitempty"`
}

func encodePageToken(t pageToken) string {
	b, err := json.Marshal(t)
	if err != nil {
		panic("registry: marshal page token: " + err.Error()) // strings and a time: cannot fail
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodePageToken answers the token s, which must have been issued for want's list and filters
// (want.After and want.AfterTime are ignored). An empty s is the first page: the zero token.
func decodePageToken(s string, want pageToken) (pageToken, bool) {
	if s == "" {
		return pageToken{}, true
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return pageToken{}, false
	}
	var got pageToken
	if err := json.Unmarshal(b, &got); err != nil {
		return pageToken{}, false
	}
	same := got.List == want.List && got.Prefix == want.Prefix && got.Holder == want.Holder &&
		got.Owner == want.Owner && got.Execution == want.Execution && slices.Equal(got.Statuses, want.Statuses)
	return got, same
}

// pageSize answers the page size of a request: 0 means 100.
func pageSize(n int32) int {
	if n <= 0 {
		return 100
	}
	return int(n)
}
