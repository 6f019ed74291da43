module github.com/converge-dev/converge/services/registry

go 1.26.0
