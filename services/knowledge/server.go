// Package knowledge is converge's Knowledge service: see DESIGN.md §1.
package knowledge

import (
	"context"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"

	"github.com/converge-dev/converge/services/knowledge/store"
)

// Server implements knowledgev1.KnowledgeServiceServer on a store.
type Server struct {
	knowledgev1.UnimplementedKnowledgeServiceServer
	store store.Store
}

// New returns the Knowledge service on st.
func New(st store.Store) *Server { return &Server{store: st} }

var _ knowledgev1.KnowledgeServiceServer = (*Server)(nil)

// RecordItem answers Unimplemented until the Knowledge issue (#3) builds it: recording and deduplicating knowledge items.
func (s *Server) RecordItem(context.Context, *knowledgev1.RecordItemRequest) (*knowledgev1.RecordItemResponse, error) {
	return nil, unimplemented("RecordItem", "recording and deduplicating knowledge items")
}

// QueryItems answers Unimplemented until the Knowledge issue (#3) builds it: glob, confidence and full-text queries.
func (s *Server) QueryItems(context.Context, *knowledgev1.QueryItemsRequest) (*knowledgev1.QueryItemsResponse, error) {
	return nil, unimplemented("QueryItems", "glob, confidence and full-text queries")
}

// GetItem answers Unimplemented until the Knowledge issue (#3) builds it: knowledge item storage.
func (s *Server) GetItem(context.Context, *knowledgev1.GetItemRequest) (*knowledgev1.GetItemResponse, error) {
	return nil, unimplemented("GetItem", "knowledge item storage")
}

// ListItems answers Unimplemented until the Knowledge issue (#3) builds it: knowledge item storage.
func (s *Server) ListItems(context.Context, *knowledgev1.ListItemsRequest) (*knowledgev1.ListItemsResponse, error) {
	return nil, unimplemented("ListItems", "knowledge item storage")
}

// ConfirmItem answers Unimplemented until the Knowledge issue (#3) builds it: confidence confirmation and decay.
func (s *Server) ConfirmItem(context.Context, *knowledgev1.ConfirmItemRequest) (*knowledgev1.ConfirmItemResponse, error) {
	return nil, unimplemented("ConfirmItem", "confidence confirmation and decay")
}

// RefuteItem answers Unimplemented until the Knowledge issue (#3) builds it: confidence confirmation and decay.
func (s *Server) RefuteItem(context.Context, *knowledgev1.RefuteItemRequest) (*knowledgev1.RefuteItemResponse, error) {
	return nil, unimplemented("RefuteItem", "confidence confirmation and decay")
}

// DeleteItem answers Unimplemented until the Knowledge issue (#3) builds it: knowledge item storage.
func (s *Server) DeleteItem(context.Context, *knowledgev1.DeleteItemRequest) (*knowledgev1.DeleteItemResponse, error) {
	return nil, unimplemented("DeleteItem", "knowledge item storage")
}
