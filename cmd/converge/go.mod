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

replace github.com/converge-dev/converge/gen => ../../gen

replace github.com/converge-dev/converge/platform => ../../platform

replace github.com/converge-dev/converge/services/scheduler => ../../services/scheduler

replace github.com/converge-dev/converge/services/agent => ../../services/agent

replace github.com/converge-dev/converge/services/verifier => ../../services/verifier

replace github.com/converge-dev/converge/services/knowledge => ../../services/knowledge

replace github.com/converge-dev/converge/services/registry => ../../services/registry
