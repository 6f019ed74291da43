module github.com/converge-dev/converge/services/agent

go 1.26.0

require (
	github.com/converge-dev/converge/gen v0.0.0-00010101000000-000000000000
	github.com/converge-dev/converge/platform v0.0.0-00010101000000-000000000000
	github.com/spf13/cobra v1.10.2
)

replace github.com/converge-dev/converge/gen => ../../gen

replace github.com/converge-dev/converge/platform => ../../platform
