// Package gen holds the Go code generated from converge's contracts under proto/ (buf generate) and
// the compiled descriptor image of those contracts with their comments.
//
// Generated Go code carries descriptors without source comments, so server reflection built on it
// alone would show `grpcurl describe` without the operators' manual. Files answers descriptors
// built from converge.binpb (`buf build`, source info included), which every server passes to its
// reflection service.
package gen

import (
	_ "embed"
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

//go:embed converge.binpb
var image []byte

var files = sync.OnceValues(func() (*protoregistry.Files, error) {
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(image, &set); err != nil {
		return nil, fmt.Errorf("gen: decode descriptor image: %w", err)
	}
	f, err := protodesc.NewFiles(&set)
	if err != nil {
		return nil, fmt.Errorf("gen: build descriptor registry: %w", err)
	}
	return f, nil
})

// Files answers the descriptors of every converge contract and its imports, with source comments.
func Files() (*protoregistry.Files, error) { return files() }

// FileDescriptorSet answers a copy of the raw descriptor image, with source comments.
func FileDescriptorSet() (*descriptorpb.FileDescriptorSet, error) {
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(image, &set); err != nil {
		return nil, fmt.Errorf("gen: decode descriptor image: %w", err)
	}
	return &set, nil
}
