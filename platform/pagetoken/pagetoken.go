// Package pagetoken is the one page-token codec of converge's List RPCs. A token is opaque to
// clients and bound to the request that issued it, in the manner of spicedb's cursor package:
// it carries a fingerprint of the request's filters (every field but page_token and page_size),
// so a token replayed with other filters, or with another List RPC, is refused as
// InvalidArgument on page_token instead of answering a page of something else.
//
// Layout, base64url without padding:
//
//	version (1 byte) | filters fingerprint (8 bytes) | cursor (JSON) | check (8 bytes)
//
// The check is a SHA-256 of everything before it: a token that was cut or edited is
// "malformed". It guards against accidents, not forgery; a forged cursor only moves the client
// to another position in a list it may read anyway.
package pagetoken

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/converge-dev/converge/platform/grpcerr"
)

// version is the first byte of every token; a codec change that old tokens cannot follow bumps
// it, and the old tokens are then "malformed" (clients start again from the first page).
const version = 1

const (
	fingerprintLen = 8
	checkLen       = 8
)

// Field is the request field a token error names.
const Field = "page_token"

// Reasons of an [Error], the description of its field violation.
const (
	ReasonMalformed    = "malformed page token: pass the next_page_token of the previous page as it is"
	ReasonOtherFilters = "page token was issued for other filters: keep the filters of the first page, or start again without a page token"
)

// Error is a page token that cannot be used with the request. It is a gRPC status error:
// InvalidArgument with one field violation on page_token.
type Error struct {
	// Reason is ReasonMalformed or ReasonOtherFilters.
	Reason string
}

func (e *Error) Error() string { return e.Reason }

// GRPCStatus answers InvalidArgument with a field violation on page_token.
func (e *Error) GRPCStatus() *status.Status {
	st, _ := status.FromError(grpcerr.InvalidArgument("invalid "+Field+": "+e.Reason,
		grpcerr.FieldViolation{Field: Field, Description: e.Reason}))
	return st
}

// Encode answers the token of the page after cursor, for the request req (a List request; its
// page_token and page_size are not part of the binding). cursor is marshalled as JSON.
func Encode(req proto.Message, cursor any) string {
	payload, err := json.Marshal(cursor)
	if err != nil {
		panic(fmt.Sprintf("pagetoken: marshal cursor %T: %v", cursor, err)) // a programming error
	}
	b := make([]byte, 0, 1+fingerprintLen+len(payload)+checkLen)
	b = append(b, version)
	b = append(b, fingerprint(req)...)
	b = append(b, payload...)
	b = append(b, check(b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Decode reads token into cursor (a pointer, as for json.Unmarshal) for the request req. It
// answers false and no error for an empty token (the first page), and an *[Error] for a token
// that is malformed or was issued for other filters.
func Decode(token string, req proto.Message, cursor any) (bool, error) {
	if token == "" {
		return false, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) < 1+fingerprintLen+checkLen || b[0] != version {
		return false, &Error{Reason: ReasonMalformed}
	}
	body, sum := b[:len(b)-checkLen], b[len(b)-checkLen:]
	if !bytes.Equal(check(body), sum) {
		return false, &Error{Reason: ReasonMalformed}
	}
	if !bytes.Equal(body[1:1+fingerprintLen], fingerprint(req)) {
		return false, &Error{Reason: ReasonOtherFilters}
	}
	if err := json.Unmarshal(body[1+fingerprintLen:], cursor); err != nil {
		return false, &Error{Reason: ReasonMalformed}
	}
	return true, nil
}

// check is the integrity check of a token's body.
func check(body []byte) []byte {
	sum := sha256.Sum256(append([]byte("converge page token\x00"), body...))
	return sum[:checkLen]
}

// fingerprint identifies req's type and filters: its deterministic wire form without
// page_token and page_size.
func fingerprint(req proto.Message) []byte {
	m := proto.Clone(req)
	r := m.ProtoReflect()
	fields := r.Descriptor().Fields()
	for _, name := range []protoreflect.Name{"page_token", "page_size"} {
		if fd := fields.ByName(name); fd != nil {
			r.Clear(fd)
		}
	}
	wire, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("pagetoken: marshal %s: %v", r.Descriptor().FullName(), err)) // a request that decoded marshals
	}
	h := sha256.New()
	h.Write([]byte(r.Descriptor().FullName()))
	h.Write([]byte{0})
	h.Write(wire)
	return h.Sum(nil)[:fingerprintLen]
}
