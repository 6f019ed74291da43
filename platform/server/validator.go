package server

import (
	"sync"

	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// processValidator is the request validator every Server of the process shares. protovalidate
// compiles a message's rules (CEL programs, their ASTs) the first time it validates the message,
// and keeps them in the validator: a validator per Server compiled them again for every server a
// process starts (every test, every benchmark run), and a fresh one made each RPC's first call
// wait for its compilation (issue 17, P1b: 20–30 ms of the Scheduler's first CreateTaskList,
// StartExecution, ClaimTask and CompleteTask).
var processValidator = sync.OnceValues(func() (protovalidate.Validator, error) { return protovalidate.New() })

// warmValidator compiles, into v, the rules of every request message of services, so that a
// server that has started answers its first call of each RPC without compiling them then. A
// message validated before (by this or another server of the process) costs one evaluation of
// an empty message. A service whose descriptor is not registered is left to the lazy path.
func warmValidator(v protovalidate.Validator, services []Service) {
	for _, svc := range services {
		if svc.Desc == nil {
			continue
		}
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc.Desc.ServiceName))
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if err != nil || !ok {
			continue
		}
		for i := range sd.Methods().Len() {
			mt, err := protoregistry.GlobalTypes.FindMessageByName(sd.Methods().Get(i).Input().FullName())
			if err != nil {
				continue
			}
			_ = v.Validate(mt.New().Interface(), pathOptions...) // an empty request's violations do not matter
		}
	}
}
