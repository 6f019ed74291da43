package gen_test

import (
	"strings"
	"testing"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"buf.build/go/protovalidate"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/converge-dev/converge/gen"
	// The generated packages register the Go types the validator compiles rules for.
	_ "github.com/converge-dev/converge/gen/converge/agent/v1"
	_ "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	_ "github.com/converge-dev/converge/gen/converge/registry/v1"
	_ "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	_ "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// convergeFiles answers the contract files of converge itself (not their imports).
func convergeFiles(t *testing.T) []protoreflect.FileDescriptor {
	t.Helper()
	files, err := gen.Files()
	require.NoError(t, err)
	var out []protoreflect.FileDescriptor
	files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if strings.HasPrefix(string(fd.Package()), "converge.") {
			out = append(out, fd)
		}
		return true
	})
	require.NotEmpty(t, out)
	return out
}

// The image must describe the same contracts the generated Go code was built from.
func TestImageMatchesGeneratedCode(t *testing.T) {
	t.Parallel()
	for _, fd := range convergeFiles(t) {
		goFD, err := protoregistry.GlobalFiles.FindFileByPath(fd.Path())
		require.NoError(t, err, "%s is in converge.binpb but not in the generated Go code: run make generate", fd.Path())
		want := proto.Clone(protoDesc(fd)).(*descriptorpb.FileDescriptorProto)
		want.SourceCodeInfo = nil
		got := protoDesc(goFD)
		// Managed mode sets the file options (go_package, java_package, ...) at generation time only.
		want.Options, got.Options = nil, nil
		require.True(t, proto.Equal(want, got), "%s: converge.binpb and generated Go code differ: run make generate", fd.Path())
	}
}

// Every service, RPC, message, field, enum and enum value carries a comment: `grpcurl describe` is
// the operators' manual.
func TestEverythingIsCommented(t *testing.T) {
	t.Parallel()
	for _, fd := range convergeFiles(t) {
		locs := fd.SourceLocations()
		check := func(d protoreflect.Descriptor) {
			loc := locs.ByDescriptor(d)
			require.NotEmpty(t, strings.TrimSpace(loc.LeadingComments+loc.TrailingComments),
				"%s has no comment (%s)", d.FullName(), fd.Path())
		}
		var walkMsg func(md protoreflect.MessageDescriptor)
		walkEnum := func(ed protoreflect.EnumDescriptor) {
			check(ed)
			for i := 0; i < ed.Values().Len(); i++ {
				check(ed.Values().Get(i))
			}
		}
		walkMsg = func(md protoreflect.MessageDescriptor) {
			if md.IsMapEntry() {
				return
			}
			check(md)
			for i := 0; i < md.Fields().Len(); i++ {
				check(md.Fields().Get(i))
			}
			for i := 0; i < md.Messages().Len(); i++ {
				walkMsg(md.Messages().Get(i))
			}
			for i := 0; i < md.Enums().Len(); i++ {
				walkEnum(md.Enums().Get(i))
			}
		}
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			check(sd)
			for j := 0; j < sd.Methods().Len(); j++ {
				check(sd.Methods().Get(j))
			}
		}
		for i := 0; i < fd.Messages().Len(); i++ {
			walkMsg(fd.Messages().Get(i))
		}
		for i := 0; i < fd.Enums().Len(); i++ {
			walkEnum(fd.Enums().Get(i))
		}
	}
}

// Every field a client sends (requests and the messages inside them) carries protovalidate rules
// bounding it: strings and bytes a size or pattern, repeated fields and maps a count, enums
// defined_only. Booleans and nested messages (checked in turn) need none.
func TestEveryRequestFieldIsBounded(t *testing.T) {
	t.Parallel()
	seen := map[protoreflect.FullName]bool{}
	var walk func(md protoreflect.MessageDescriptor)
	walk = func(md protoreflect.MessageDescriptor) {
		if seen[md.FullName()] || !strings.HasPrefix(string(md.FullName()), "converge.") {
			return
		}
		seen[md.FullName()] = true
		for i := 0; i < md.Fields().Len(); i++ {
			f := md.Fields().Get(i)
			rules, _ := proto.GetExtension(f.Options(), validate.E_Field).(*validate.FieldRules)
			name := f.FullName()
			switch {
			case f.IsMap():
				require.NotNil(t, rules.GetMap().MaxPairs, "%s: map needs map.max_pairs", name)
				if f.MapValue().Kind() == protoreflect.MessageKind {
					walk(f.MapValue().Message())
				}
				continue
			case f.IsList():
				require.NotNil(t, rules.GetRepeated().MaxItems, "%s: repeated field needs repeated.max_items", name)
				rules = rules.GetRepeated().GetItems()
			}
			switch f.Kind() {
			case protoreflect.StringKind:
				s := rules.GetString()
				bounded := s.MaxLen != nil || s.MaxBytes != nil || s.Pattern != nil || len(s.In) > 0 || s.Const != nil ||
					s.GetUuid() || s.GetHostname()
				require.True(t, bounded, "%s: string needs max_len, max_bytes or pattern", name)
			case protoreflect.BytesKind:
				require.NotNil(t, rules.GetBytes().MaxLen, "%s: bytes needs max_len", name)
			case protoreflect.EnumKind:
				require.True(t, rules.GetEnum().GetDefinedOnly(), "%s: enum needs defined_only", name)
			case protoreflect.MessageKind, protoreflect.GroupKind:
				walk(f.Message())
			}
		}
	}
	for _, fd := range convergeFiles(t) {
		for i := 0; i < fd.Services().Len(); i++ {
			methods := fd.Services().Get(i).Methods()
			for j := 0; j < methods.Len(); j++ {
				walk(methods.Get(j).Input())
			}
		}
	}
	require.NotEmpty(t, seen)
}

// Every rule in every contract compiles (a CEL typo would otherwise surface as Internal at runtime).
func TestRulesCompile(t *testing.T) {
	t.Parallel()
	var descs []protoreflect.MessageDescriptor
	for _, fd := range convergeFiles(t) {
		goFD, err := protoregistry.GlobalFiles.FindFileByPath(fd.Path())
		require.NoError(t, err)
		for i := 0; i < goFD.Messages().Len(); i++ {
			descs = append(descs, goFD.Messages().Get(i))
		}
	}
	_, err := protovalidate.New(protovalidate.WithMessageDescriptors(descs...))
	require.NoError(t, err)
}

func protoDesc(fd protoreflect.FileDescriptor) *descriptorpb.FileDescriptorProto {
	return protodesc.ToFileDescriptorProto(fd)
}
