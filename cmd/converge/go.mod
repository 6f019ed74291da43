module github.com/converge-dev/converge/cmd/converge

go 1.26.0

require (
	github.com/converge-dev/converge/gen v0.0.0-00010101000000-000000000000
	github.com/converge-dev/converge/platform v0.0.0-00010101000000-000000000000
	github.com/converge-dev/converge/services/agent v0.0.0-00010101000000-000000000000
	github.com/converge-dev/converge/services/knowledge v0.0.0-00010101000000-000000000000
	github.com/converge-dev/converge/services/registry v0.0.0-00010101000000-000000000000
	github.com/converge-dev/converge/services/scheduler v0.0.0-00010101000000-000000000000
	github.com/converge-dev/converge/services/verifier v0.0.0-00010101000000-000000000000
	github.com/spf13/cobra v1.10.2
)

require (
	github.com/stretchr/testify v1.12.1 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261019180522-ce908d29299b // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/converge-dev/converge/gen => ../../gen

replace github.com/converge-dev/converge/platform => ../../platform

replace github.com/converge-dev/converge/services/scheduler => ../../services/scheduler

replace github.com/converge-dev/converge/services/agent => ../../services/agent

replace github.com/converge-dev/converge/services/verifier => ../../services/verifier

replace github.com/converge-dev/converge/services/knowledge => ../../services/knowledge

replace github.com/converge-dev/converge/services/registry => ../../services/registry
