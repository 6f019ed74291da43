package check

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The reflection service exists as grpc.reflection.v1 and, on older servers, v1alpha; their
// messages are the same on the wire, so one client speaks both.
var reflectionMethods = []string{
	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
}

// errNoReflection is a server without the reflection service asked for.
var errNoReflection = errors.New("no reflection service")

// maxReflectedFiles bounds how many files a method's types may span.
const maxReflectedFiles = 1000

// resolveMethod finds the descriptor of method ("pkg.Service/Method") through the server's
// reflection service, with the types of every file it depends on.
func resolveMethod(ctx context.Context, conn *grpc.ClientConn, method string) (protoreflect.MethodDescriptor, *dynamicpb.Types, error) {
	service, name, ok := strings.Cut(method, "/")
	if !ok {
		return nil, nil, status.Errorf(codes.InvalidArgument, "method %q is not package.Service/Method", method)
	}
	var files []*descriptorpb.FileDescriptorProto
	err := errNoReflection
	for _, rm := range reflectionMethods {
		files, err = reflectFiles(ctx, conn, rm, service)
		if !errors.Is(err, errNoReflection) {
			break
		}
	}
	switch {
	case errors.Is(err, errNoReflection):
		return nil, nil, status.Errorf(codes.Unimplemented, "the server has no reflection service, so %s cannot be resolved", method)
	case status.Code(err) == codes.NotFound:
		return nil, nil, status.Errorf(codes.Unimplemented, "service %s not found by reflection", service)
	case err != nil:
		return nil, nil, err
	}
	reg, err := protodesc.NewFiles(&descriptorpb.FileDescriptorSet{File: files})
	if err != nil {
		return nil, nil, status.Errorf(codes.FailedPrecondition, "the server's reflection answered descriptors that do not link: %v", err)
	}
	d, err := reg.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return nil, nil, status.Errorf(codes.Unimplemented, "service %s not found by reflection", service)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, nil, status.Errorf(codes.Unimplemented, "%s is not a service", service)
	}
	md := sd.Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return nil, nil, status.Errorf(codes.Unimplemented, "service %s has no method %s", service, name)
	}
	return md, dynamicpb.NewTypes(reg), nil
}

// reflectFiles asks the reflection service at rm for the file defining symbol and every file it
// imports, transitively.
func reflectFiles(ctx context.Context, conn *grpc.ClientConn, rm, symbol string) ([]*descriptorpb.FileDescriptorProto, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := conn.NewStream(sctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, rm)
	if err != nil {
		if status.Code(err) == codes.Unimplemented {
			return nil, errNoReflection
		}
		return nil, err
	}
	byName := map[string]*descriptorpb.FileDescriptorProto{}
	var order []*descriptorpb.FileDescriptorProto
	ask := func(req *reflectionpb.ServerReflectionRequest) error {
		if err := stream.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		res := new(reflectionpb.ServerReflectionResponse)
		if err := stream.RecvMsg(res); err != nil {
			if status.Code(err) == codes.Unimplemented {
				return errNoReflection
			}
			return err
		}
		if e := res.GetErrorResponse(); e != nil {
			return status.Errorf(codes.Code(e.GetErrorCode()), "reflection: %s", e.GetErrorMessage())
		}
		for _, raw := range res.GetFileDescriptorResponse().GetFileDescriptorProto() {
			fd := new(descriptorpb.FileDescriptorProto)
			if err := proto.Unmarshal(raw, fd); err != nil {
				return status.Errorf(codes.FailedPrecondition, "reflection answered a descriptor that does not decode: %v", err)
			}
			if _, seen := byName[fd.GetName()]; !seen {
				byName[fd.GetName()] = fd
				order = append(order, fd)
			}
		}
		return nil
	}
	err = ask(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: symbol},
	})
	if err != nil {
		return nil, err
	}
	// Fetch the imports the server did not send along.
	for i := 0; i < len(order); i++ {
		if len(order) > maxReflectedFiles {
			return nil, status.Errorf(codes.ResourceExhausted, "%s spans more than %d files", symbol, maxReflectedFiles)
		}
		for _, dep := range order[i].GetDependency() {
			if _, ok := byName[dep]; ok {
				continue
			}
			err := ask(&reflectionpb.ServerReflectionRequest{
				MessageRequest: &reflectionpb.ServerReflectionRequest_FileByFilename{FileByFilename: dep},
			})
			if err != nil {
				return nil, fmt.Errorf("reflection: file %s: %w", dep, err)
			}
			if _, ok := byName[dep]; !ok {
				return nil, status.Errorf(codes.FailedPrecondition, "reflection did not answer file %s", dep)
			}
		}
	}
	_ = stream.CloseSend()
	return order, nil
}

// newMessage is an empty message of type md.
func newMessage(md protoreflect.MessageDescriptor) *dynamicpb.Message {
	return dynamicpb.NewMessage(md)
}
