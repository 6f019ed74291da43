module github.com/converge-dev/converge/cmd/converge

go 1.26.0
