package registry

import (
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/converge-dev/converge/platform/pagetoken"
)

// Page tokens are platform/pagetoken's: opaque to clients and bound to the request's filters,
// so a token used with another query is refused (InvalidArgument on page_token) rather than
// silently answering a wrong page.

// pageCursor is where the next page of a list starts.
type pageCursor struct {
	// After is the last resource, pattern or instance id of the previous page.
	After string `json:"a"`
	// AfterTime is the spawn time of the last agent of the previous page (ListAgents).
	AfterTime time.Time `json:"t,omitzero"`
}

// encodePageToken answers the token of the page after c for the request req.
func encodePageToken(req proto.Message, c pageCursor) string { return pagetoken.Encode(req, c) }

// decodePageToken answers where req's page starts: the zero cursor for the first page, a
// *pagetoken.Error (InvalidArgument) for a token not issued for req's filters.
func decodePageToken(req interface {
	proto.Message
	GetPageToken() string
},
) (pageCursor, error) {
	var c pageCursor
	_, err := pagetoken.Decode(req.GetPageToken(), req, &c)
	return c, err
}

// pageSize answers the page size of a request: 0 means 100.
func pageSize(n int32) int {
	if n <= 0 {
		return 100
	}
	return int(n)
}
