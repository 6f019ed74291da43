module github.com/converge-dev/converge/security

go 1.26.0
