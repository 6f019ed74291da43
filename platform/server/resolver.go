package server

import (
	"errors"

	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// fallbackResolver answers descriptors from primary (e.g. the gen module's
// descriptors with comments) and, for what primary does not know, from the
// descriptors linked into the binary. Without the fallback, reflection could
// not describe services primary lacks (health, reflection itself) nor the
// types of error details such as google.rpc.BadRequest, which grpcurl needs
// to print them.
type fallbackResolver struct {
	primary  protodesc.Resolver
	fallback protodesc.Resolver
}

// FindFileByPath implements protodesc.Resolver.
func (r fallbackResolver) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	fd, err := r.primary.FindFileByPath(path)
	if errors.Is(err, protoregistry.NotFound) {
		return r.fallback.FindFileByPath(path)
	}
	return fd, err
}

// FindDescriptorByName implements protodesc.Resolver.
func (r fallbackResolver) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	d, err := r.primary.FindDescriptorByName(name)
	if errors.Is(err, protoregistry.NotFound) {
		return r.fallback.FindDescriptorByName(name)
	}
	return d, err
}

// descriptorResolver returns the resolver reflection uses for cfg.
func descriptorResolver(primary protodesc.Resolver) protodesc.Resolver {
	if primary == nil {
		return protoregistry.GlobalFiles
	}
	return fallbackResolver{primary: primary, fallback: protoregistry.GlobalFiles}
}
