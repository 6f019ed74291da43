module github.com/converge-dev/converge/platform

go 1.26.0
